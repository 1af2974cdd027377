package xa_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/testrig/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// exampleDatabases gives the example a fresh database on each server,
// with an accounts table holding one account of 100.
func exampleDatabases() (mysqlDSN, pgDSN string) {
	t := &fatalT{}
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	ctx := context.Background()
	if err := my.Server.Exec(ctx, my.Name, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT) ENGINE=InnoDB", "INSERT INTO accounts VALUES (1, 100)"); err != nil {
		panic(err)
	}
	if err := pg.Server.Exec(ctx, pg.Name, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT)", "INSERT INTO accounts VALUES (1, 100)"); err != nil {
		panic(err)
	}
	return my.DSN(), pg.DSN()
}

func exampleBalances(mysqlDSN, pgDSN string) string {
	ctx := context.Background()
	db, err := sql.Open("mysql", mysqlDSN)
	if err != nil {
		return err.Error()
	}
	defer db.Close()
	var a, b int
	if err := db.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&a); err != nil {
		return err.Error()
	}
	conn, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		return err.Error()
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&b); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("maria %d, pg %d", a, b)
}

// fatalT is a minimal testing.TB for examples: failures panic (the
// example then fails), a skip means no database: the example cannot run
// and says so.
type fatalT struct{ testing.TB }

func (*fatalT) Helper()                   {}
func (*fatalT) Name() string              { return "Example" }
func (*fatalT) Cleanup(func())            {}
func (*fatalT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (*fatalT) Fatal(a ...any)            { panic(fmt.Sprint(a...)) }
func (*fatalT) Skipf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "example needs databases: "+f+"\n", a...)
	panic("no databases")
}
