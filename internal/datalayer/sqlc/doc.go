// Package sqlc holds, in its sub-packages, the code sqlc v1.31.1 generated
// for the data-layer tests' queries: mydb and pgdb are the database/sql
// flavour for MySQL and PostgreSQL (sql_package: database/sql,
// emit_prepared_queries), pgxdb the pgx/v5 flavour with a :copyfrom and a
// :batchexec query. sqlc.yaml, the schema_*.sql and query_*.sql files beside
// this one are its input; after changing them, regenerate with
//
//	go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate
//
// in this directory (sqlc needs cgo; the build does not run it, and
// `sqlc diff` shows whether the committed code still matches). The tests
// check that an enlisted session (Conn.DB(), or the PostgreSQL
// *postgres.Conn itself) satisfies the generated DBTX interface and runs
// the queries inside the branch.
package sqlc

//go:generate go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate
