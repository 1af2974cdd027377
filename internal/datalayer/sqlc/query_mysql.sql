-- name: AddBalance :execrows
UPDATE accounts SET balance = balance + ? WHERE id = ?;

-- name: GetAccount :one
SELECT id, balance FROM accounts WHERE id = ?;

-- name: ListAccounts :many
SELECT id, balance FROM accounts ORDER BY id;
