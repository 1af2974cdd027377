package cli_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/xa"
)

// A decision taken by PostgreSQL as the last resource lives in its
// decision table, not in the log: list shows it, rollback refuses to
// contradict it, recover commits the MariaDB branch it covers and then
// prunes the row.
func TestLastResourceDecision(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const table = "xa_decisions"
	pgLast, err := xapg.Open(e.ctx, xapg.Config{Name: pgName, DSN: e.pg.DSN(), DecisionTable: table, Init: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pgLast.Close()

	// The state a coordinator leaves when it dies right after the last
	// resource committed: the MariaDB branch prepared, PostgreSQL's work
	// and the decision committed.
	g, err := xa.NewGlobalID(e.node, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mb, err := e.myRM.Start(e.ctx, e.xid(g, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mb.Session().(*xamysql.Conn).ExecContext(e.ctx, "INSERT INTO kv (k, v) VALUES (7, 7)"); err != nil {
		t.Fatal(err)
	}
	if v, err := mb.Prepare(e.ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	origin := mb.(xa.OriginReporter).Origin()
	mb.Close() //nolint:errcheck // the coordinator is gone
	pb, err := pgLast.Start(e.ctx, e.xid(g, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pb.Session().(*xapg.Conn).Exec(e.ctx, "INSERT INTO kv (k, v) VALUES (7, 7)"); err != nil {
		t.Fatal(err)
	}
	rec := xa.CommitRecord{ID: g, Logged: time.Now(), Branches: []xa.BranchRecord{{RM: myName, XID: e.xid(g, 0), Origin: origin}}}
	if err := pb.(xa.LastResource).CommitLast(e.ctx, rec); err != nil {
		t.Fatal(err)
	}

	// The coordinator's log holds nothing: the decision is in PostgreSQL.
	cfg := e.writeConfig("last.yaml", fmt.Sprintf("node: %s\nlog:\n  dir: %s\nparticipants:\n  - name: %s\n    driver: mysql\n    dsn: %s\n  - name: %s\n    driver: postgres\n    dsn: %s\n    decision_table: %s\n",
		e.node, strconv.Quote(e.logDir), myName, strconv.Quote(e.my.DSN()), pgName, strconv.Quote(e.pg.DSN()), table))

	var out listJSON
	e.runWith(cfg, "list", "-o", "json").want(t, 3).json(t, &out)
	if b := findBranch(t, out.Branches, myName, e.xid(g, 0).String()); b.Decision != "commit" || b.Action != "commit" {
		t.Fatalf("list: %+v; want the stored decision (commit)", b)
	}
	e.runWith(cfg, "rollback", e.xid(g, 0).String()).want(t, 1).stderrHas(t, "commit is logged", "--force")

	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.runWith(cfg, "recover", "-o", "json")
		decs, err := pgLast.Decisions(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.code == 0 && len(decs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("recover did not finish: %s; %d decisions left", r, len(decs))
		}
		time.Sleep(300 * time.Millisecond)
	}
	e.wantRows(7, true, true)
}
