// Package sqlc holds, in its sub-packages, the code sqlc v1.31 generates for
// the data-layer tests' queries (query.sql beside this file), written by
// hand in exactly the shape sqlc emits (sqlc itself is not run by the
// build): mydb and pgdb are the database/sql flavour for MySQL and
// PostgreSQL (sql_package: database/sql, emit_prepared_queries), pgxdb the
// pgx/v5 flavour (sql_package: pgx/v5) with a :copyfrom and a :batchexec
// query. The generated types are what the tests check: that an enlisted
// session (Conn.DB(), or the PostgreSQL *postgres.Conn itself) satisfies
// the generated DBTX interface and runs the queries inside the branch.
package sqlc
