-- The data-layer tests' queries, as sqlc reads them (MySQL spelling; the
-- PostgreSQL packages use $1, $2 ...).

-- name: AddBalance :execrows
UPDATE accounts SET balance = balance + ? WHERE id = ?;

-- name: GetAccount :one
SELECT id, balance FROM accounts WHERE id = ?;

-- name: ListAccounts :many
SELECT id, balance FROM accounts ORDER BY id;

-- PostgreSQL (pgx/v5) only:

-- name: InsertLedger :copyfrom
INSERT INTO ledger (id, amount) VALUES ($1, $2);

-- name: AddBalances :batchexec
UPDATE accounts SET balance = balance + $1 WHERE id = $2;
