package xa_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// Example_transfer moves 10 from an account in MariaDB to an account in
// PostgreSQL in one atomic commit.
func Example_transfer() {
	ctx := context.Background()
	mariaDSN, pgDSN := exampleDatabases() // e.g. "root@tcp(127.0.0.1:3306)/bank", "postgres://..."

	// The decision log: commit decisions are durable here before any
	// branch is told to commit. Creating one is an explicit act, done once
	// per node (xactl log init does the same); later runs Open it.
	dir, _ := os.MkdirTemp("", "xa-example-")
	defer os.RemoveAll(dir)
	ident, err := xa.NewLogIdentity("example", 0, 0, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	decisions, err := filelog.Create(dir+"/log", ident, filelog.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer decisions.Close()

	// One resource manager per database; Open checks that the server is
	// set up for two-phase commit and says how to fix it if not.
	maria, err := xamysql.Open(ctx, xamysql.Config{Name: "maria", DSN: mariaDSN, Init: true})
	if err != nil {
		log.Fatal(err)
	}
	defer maria.Close()
	pg, err := xapg.Open(ctx, xapg.Config{Name: "pg", DSN: pgDSN, Init: true})
	if err != nil {
		log.Fatal(err)
	}
	defer pg.Close()

	mgr, err := xa.NewManager(xa.Config{Node: "example", Log: decisions})
	if err != nil {
		log.Fatal(err)
	}
	res, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
		m, err := maria.Enlist(ctx, tx) // a database/sql-style session
		if err != nil {
			return err
		}
		if _, err := m.ExecContext(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1"); err != nil {
			return err
		}
		p, err := pg.Enlist(ctx, tx) // a pgx-style session
		if err != nil {
			return err
		}
		_, err = p.Exec(ctx, "UPDATE accounts SET balance = balance + 10 WHERE id = 1")
		return err
	})
	if err != nil {
		log.Fatal(err) // an *xa.AbortError says which database refused and why
	}
	fmt.Println("committed:", res.Committed, "pending:", len(res.Pending))
	fmt.Println("balances:", exampleBalances(mariaDSN, pgDSN))
	// Output:
	// committed: true pending: 0
	// balances: maria 90, pg 110
}
