-- name: AddBalance :execrows
UPDATE accounts SET balance = balance + $1 WHERE id = $2;

-- name: GetAccount :one
SELECT id, balance FROM accounts WHERE id = $1;

-- name: ListAccounts :many
SELECT id, balance FROM accounts ORDER BY id;

-- name: InsertLedger :copyfrom
INSERT INTO ledger (id, amount) VALUES ($1, $2);

-- name: AddBalances :batchexec
UPDATE accounts SET balance = balance + $1 WHERE id = $2;
