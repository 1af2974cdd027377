package datalayer_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/drivers/mysql"
	"github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// bank is one MariaDB and one PostgreSQL database, each with a table
// accounts (id, balance >= 0): account 1 holds 100 in MariaDB and 0 in
// PostgreSQL; a manager on a decision log made as xactl log init makes it.
type bank struct {
	t     *testing.T
	maria *mysql.RM
	pg    *postgres.RM
	myRaw *sql.DB
	pgRaw *pgx.Conn
	mgr   *xa.Manager
}

func newBank(t *testing.T) *bank {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mdb, pdb := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	bk := &bank{t: t}
	c, err := gomysql.ParseDSN(mdb.DSN())
	if err != nil {
		t.Fatal(err)
	}
	c.Logger = &gomysql.NopLogger{}
	conn, err := gomysql.NewConnector(c)
	if err != nil {
		t.Fatal(err)
	}
	bk.myRaw = sql.OpenDB(conn)
	t.Cleanup(func() { bk.myRaw.Close() })
	for _, q := range []string{
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL, CONSTRAINT non_negative CHECK (balance >= 0)) ENGINE=InnoDB",
		"INSERT INTO accounts VALUES (1, 100)",
	} {
		if _, err := bk.myRaw.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	bk.pgRaw, err = pgx.Connect(ctx, pdb.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bk.pgRaw.Close(context.Background()) })
	for _, q := range []string{
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL CHECK (balance >= 0))",
		"INSERT INTO accounts VALUES (1, 0)",
		"CREATE TABLE ledger (id INT PRIMARY KEY, amount INT NOT NULL)",
	} {
		if _, err := bk.pgRaw.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if bk.maria, err = mysql.Open(ctx, mysql.Config{Name: "maria", DSN: mdb.DSN(), Init: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bk.maria.Close() })
	if bk.pg, err = postgres.Open(ctx, postgres.Config{Name: "pg", DSN: pdb.DSN(), Init: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bk.pg.Close)
	ident, err := xa.NewLogIdentity("datalayer", 10*time.Second, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	log, err := filelog.Create(t.TempDir(), ident, filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	if bk.mgr, err = xa.NewManager(xa.Config{Node: "datalayer", Log: log}); err != nil {
		t.Fatal(err)
	}
	return bk
}

// balances returns account 1's balance in MariaDB and in PostgreSQL, read
// outside the transaction manager.
func (bk *bank) balances() (maria, pg int) {
	bk.t.Helper()
	ctx := context.Background()
	if err := bk.myRaw.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&maria); err != nil {
		bk.t.Fatal(err)
	}
	if err := bk.pgRaw.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&pg); err != nil {
		bk.t.Fatal(err)
	}
	return maria, pg
}

// transferFunc moves amount from MariaDB's account 1 to PostgreSQL's with
// a library, on the two enlisted sessions: PostgreSQL is credited first,
// then MariaDB debited, so a debit refused by MariaDB's CHECK constraint
// leaves a credit that only the global rollback can undo.
type transferFunc func(ctx context.Context, my *mysql.Conn, pg *postgres.Conn, amount int) error

// run checks that transfer commits atomically (10 moves) and rolls back
// atomically (1000 is refused by MariaDB after PostgreSQL was credited).
func (bk *bank) run(transfer transferFunc) {
	bk.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	do := func(amount int) (xa.Result, error) {
		return bk.mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
			my, err := bk.maria.Enlist(ctx, tx)
			if err != nil {
				return err
			}
			pg, err := bk.pg.Enlist(ctx, tx)
			if err != nil {
				return err
			}
			return transfer(ctx, my, pg, amount)
		})
	}
	res, err := do(10)
	if err != nil {
		bk.t.Fatalf("transfer of 10: %v", err)
	}
	if res.OnePhase || !res.Committed {
		bk.t.Fatalf("transfer of 10: %+v, want a two-phase commit", res)
	}
	if m, p := bk.balances(); m != 90 || p != 10 {
		bk.t.Fatalf("after a transfer of 10: MariaDB %d, PostgreSQL %d; want 90 and 10", m, p)
	}
	_, err = do(1000)
	if !errors.Is(err, xa.ErrAborted) {
		bk.t.Fatalf("transfer of 1000: %v, want aborted (MariaDB's CHECK refuses the debit)", err)
	}
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		bk.t.Fatalf("transfer of 1000: %v: want MariaDB's refusal inside", err)
	}
	if m, p := bk.balances(); m != 90 || p != 10 {
		bk.t.Fatalf("after a refused transfer of 1000: MariaDB %d, PostgreSQL %d; want 90 and 10 (the credit rolled back)", m, p)
	}
}

// affected fails unless n is 1.
func affected(n int64, err error) error {
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("no account updated")
	}
	return nil
}
