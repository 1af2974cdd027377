// Package datalayer holds no product code: its tests run the data-access
// libraries Go services use (GORM, sqlx, bun, sqlc's generated code in both
// flavours, ent) on enlisted sessions of MariaDB and PostgreSQL, in one
// global transaction, against real servers. The libraries are test-only
// dependencies: no product package imports them (internal/layout checks).
//
// sqlc/ holds sqlc's generated shapes for the tests' queries, entdb/ ent's
// generated client (go generate ./internal/datalayer/entdb).
package datalayer
