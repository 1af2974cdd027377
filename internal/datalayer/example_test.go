package datalayer_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"

	gormmysql "gorm.io/driver/mysql"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/datalayer/sqlc/mydb"
	"github.com/xadb/xa/internal/datalayer/sqlc/pgxdb"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

// Example_gorm moves 10 from MariaDB to PostgreSQL with GORM on both
// enlisted sessions, in one atomic commit. GORM gets the session's *sql.DB
// (Conn.DB) and SkipDefaultTransaction: the branch is the transaction.
func Example_gorm() {
	ctx := context.Background()
	maria, pg, mgr := exampleSetup()
	type Account struct {
		ID      int
		Balance int
	}
	_, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		m, err := maria.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		p, err := pg.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		cfg := func() *gorm.Config { return &gorm.Config{SkipDefaultTransaction: true, Logger: logger.Discard} }
		gm, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: m.DB(), SkipInitializeWithVersion: true}), cfg())
		if err != nil {
			return err
		}
		gp, err := gorm.Open(gormpg.New(gormpg.Config{Conn: p.DB()}), cfg())
		if err != nil {
			return err
		}
		if err := gm.WithContext(ctx).Model(&Account{ID: 1}).Update("balance", gorm.Expr("balance - ?", 10)).Error; err != nil {
			return err
		}
		return gp.WithContext(ctx).Model(&Account{ID: 1}).Update("balance", gorm.Expr("balance + ?", 10)).Error
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(exampleBalances(ctx, maria, pg, mgr))
	// Output: maria 90, pg 110
}

// Example_sqlc moves 10 with sqlc's generated code: the database/sql
// flavour on MariaDB's Conn.DB(), the pgx/v5 flavour on the PostgreSQL
// session itself (it is a DBTX).
func Example_sqlc() {
	ctx := context.Background()
	maria, pg, mgr := exampleSetup()
	_, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		m, err := maria.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		p, err := pg.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := mydb.New(m.DB()).AddBalance(ctx, mydb.AddBalanceParams{ID: 1, Balance: -10}); err != nil {
			return err
		}
		_, err = pgxdb.New(p).AddBalance(ctx, pgxdb.AddBalanceParams{ID: 1, Balance: 10})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(exampleBalances(ctx, maria, pg, mgr))
	// Output: maria 90, pg 110
}

// exampleSetup gives an example a MariaDB and a PostgreSQL database with
// accounts (1, 100), their resource managers and a manager.
func exampleSetup() (*xamysql.RM, *xapg.RM, *xa.Manager) {
	t := &fatalT{}
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	ctx := context.Background()
	if err := my.Server.Exec(ctx, my.Name, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT) ENGINE=InnoDB", "INSERT INTO accounts VALUES (1, 100)"); err != nil {
		panic(err)
	}
	if err := pg.Server.Exec(ctx, pg.Name, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT)", "INSERT INTO accounts VALUES (1, 100)"); err != nil {
		panic(err)
	}
	maria, err := xamysql.Open(ctx, xamysql.Config{Name: "maria", DSN: my.DSN(), Init: true})
	if err != nil {
		panic(err)
	}
	p, err := xapg.Open(ctx, xapg.Config{Name: "pg", DSN: pg.DSN(), Init: true})
	if err != nil {
		panic(err)
	}
	mgr, err := xa.NewManager(xa.Config{Node: "example", Log: memrm.NewLog("example")})
	if err != nil {
		panic(err)
	}
	return maria, p, mgr
}

// exampleBalances reads account 1 in both databases, in a read-only
// global transaction.
func exampleBalances(ctx context.Context, maria *xamysql.RM, pg *xapg.RM, mgr *xa.Manager) string {
	var a, b int
	_, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		m, err := maria.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		if err := m.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&a); err != nil {
			return err
		}
		p, err := pg.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		return p.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&b)
	})
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("maria %d, pg %d", a, b)
}

// fatalT is a minimal testing.TB for examples: failures panic (the
// example then fails); a skip means no database.
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
