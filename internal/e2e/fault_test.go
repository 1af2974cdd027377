package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/lab/bank"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/internal/testrig/faultproxy"
	"github.com/xadb/xa/xa"
)

// TestLostCommitReply drops the connection after COMMIT reached the server
// and before its reply came back, on each database in turn. The
// coordinator must treat it as "outcome unknown", finish through another
// session, tell the caller committed, and the databases must agree.
func TestLostCommitReply(t *testing.T) {
	t.Parallel()
	for _, side := range []string{"mariadb", "postgres"} {
		t.Run(side, func(t *testing.T) {
			t.Parallel()
			myDB, pgDB := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
			b := newBank(t, myDB, pgDB, 2)
			ctx := context.Background()

			var proxy *faultproxy.Proxy
			var err error
			myDSN, pgDSN := myDB.DSN(), pgDB.DSN()
			switch side {
			case "mariadb":
				proxy, err = faultproxy.Start(fmt.Sprintf("%s:%d", myDB.Server.Host, myDB.Server.Port))
				if err != nil {
					t.Fatal(err)
				}
				c, _ := gomysql.ParseDSN(myDSN)
				c.Addr = proxy.Addr()
				myDSN = c.FormatDSN()
			case "postgres":
				proxy, err = faultproxy.Start(fmt.Sprintf("%s:%d", pgDB.Server.Host, pgDB.Server.Port))
				if err != nil {
					t.Fatal(err)
				}
				c, _ := pgx.ParseConfig(pgDSN)
				pgDSN = fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", c.User, proxy.Addr(), c.Database)
			}
			defer proxy.Close()
			my, err := xamysql.Open(ctx, xamysql.Config{Name: bank.MySQLName, DSN: myDSN, Init: true})
			if err != nil {
				t.Fatal(err)
			}
			defer my.Close()
			pg, err := xapg.Open(ctx, xapg.Config{Name: bank.PostgresName, DSN: pgDSN, Init: true})
			if err != nil {
				t.Fatal(err)
			}
			defer pg.Close()
			b.timeout = 5 * time.Second
			mgr, log := b.manager(b.timeout)
			match := map[string]string{"mariadb": "XA COMMIT", "postgres": "COMMIT PREPARED"}[side]
			rule := proxy.CutAfter(match)
			res, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
				return bank.Do(ctx, tx, my, pg, bank.Transfer{From: 0, To: 1, Amount: 10, ToPostgres: true})
			})
			if !rule.Fired() {
				t.Fatalf("the proxy never saw %q: the test did not lose a reply", match)
			}
			if err != nil {
				t.Fatalf("Commit after a lost COMMIT reply: %v; want committed (the decision was durable)", err)
			}
			t.Logf("result %+v", res)
			log.Close()
			// Whatever the coordinator left (a pending branch, a record
			// kept for verification) recovery finishes.
			b.recoverAll(7 * time.Second)
			b.check([]string{res.ID.String()})
		})
	}
}
