package cli_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/sqllog"
	"github.com/xadb/xa/xa"
)

// sharedConfig returns a configuration of the test's participants with
// the decision log of node in the log database of kind at dsn.
func (e *env) sharedConfig(name, node, kind, dsn string) string {
	e.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "node: %s\nlog:\n  kind: %s\n  dsn: %s\n  lease_ttl: 2s\nparticipants:\n", node, kind, strconv.Quote(dsn))
	fmt.Fprintf(&b, "  - name: %s\n    driver: mysql\n    dsn: %s\n", myName, strconv.Quote(e.my.DSN()))
	fmt.Fprintf(&b, "  - name: %s\n    driver: postgres\n    dsn: %s\n", pgName, strconv.Quote(e.pg.DSN()))
	return e.writeConfig(name, b.String())
}

type nodesJSON struct {
	Nodes []struct {
		Node      string `json:"node"`
		LogID     string `json:"log_id"`
		State     string `json:"state"`
		Holder    string `json:"holder"`
		Kind      string `json:"kind"`
		Epoch     int64  `json:"epoch"`
		Clean     bool   `json:"clean"`
		InDoubt   *int   `json:"in_doubt"`
		Undecided *int   `json:"undecided"`
		Commits   int    `json:"commit_records"`
		LastEvent string `json:"last_event"`
	} `json:"nodes"`
}

// TestSharedLogBesideLiveNodes: the decision logs of two nodes in one
// PostgreSQL (and again MariaDB) database, made by xactl log init. While
// node A's process runs (holding its lease), xactl lists, commits what is
// decided, rolls back by hand (taking the fence), and refuses to take A's
// log over; its undecided branch waits, with who holds the log. xactl
// nodes shows both logs and their leases. Once A's lease has expired (its
// process dead), xactl recover --takeover takes the log over at a new
// epoch (recorded with who did it and why), rolls the undecided branch
// back at once and releases the log; A's process, if it came back, would
// have every decision refused by the database.
func TestSharedLogBesideLiveNodes(t *testing.T) {
	for _, kind := range []string{logdb.Postgres, logdb.MySQL} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var ldb *dbtest.DB
			if kind == logdb.Postgres {
				ldb = dbtest.PostgresDB(t)
			} else {
				ldb = dbtest.MySQLDB(t)
			}
			nodeA, nodeB := e.node, e.node+"b"
			cfgA := e.sharedConfig("a.yaml", nodeA, kind, ldb.DSN())
			cfgB := e.sharedConfig("b.yaml", nodeB, kind, ldb.DSN())
			var made struct {
				Database string        `json:"database"`
				Identity *identityJSON `json:"identity"`
			}
			e.runWith(cfgA, "-o", "json", "log", "init", "--timeout", "3s", "--grace", "4s").want(t, 0).json(t, &made)
			if made.Identity == nil || made.Identity.Node != nodeA || !strings.Contains(made.Database, kind) {
				t.Fatalf("log init: %+v", made)
			}
			id, err := xa.ParseLogID(made.Identity.ID)
			if err != nil {
				t.Fatal(err)
			}
			e.logID = id
			// Twice for a node: refused, nothing changed.
			e.runWith(cfgA, "log", "init", "--timeout", "3s", "--grace", "4s").want(t, 1).stderrHas(t, "exists already", "nothing was changed")
			// --kind and --dsn on the command line, for node B.
			e.run("--node", nodeB, "log", "init", "--kind", kind, "--dsn", ldb.DSN()).want(t, 0)

			// Node A's process runs: it holds its log's lease.
			db, d, err := logdb.Open(kind, ldb.DSN())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			s, err := sqllog.NewStore(db, d, sqllog.Options{Holder: "node-a-process", LeaseTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			a, err := s.Open(e.ctx, nodeA)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			decided, undecided, byHand := e.prepare(1), e.prepare(2), e.prepare(3)
			if err := a.LogCommit(e.ctx, decided.record()); err != nil {
				t.Fatal(err)
			}
			e.waitDetached(decided, undecided, byHand)

			var l listJSON
			e.runWith(cfgA, "-o", "json", "list").want(t, 3).json(t, &l)
			if b := findBranch(t, l.Branches, myName, decided.my.String()); b.Verdict != "commit" {
				t.Fatalf("the decided branch: %+v", b)
			}
			if b := findBranch(t, l.Branches, pgName, undecided.pg.String()); b.Verdict != "wait" || !strings.Contains(b.Reason, "node-a-process") {
				t.Fatalf("the undecided branch of a live node's log: %+v; want wait, naming the holder", b)
			}
			// recover beside the live node: decided branches commit,
			// presumed abort is the holder's.
			var rec recoverJSON
			e.runWith(cfgA, "-o", "json", "recover").want(t, 3).json(t, &rec)
			e.wantRows(decided.k, true, true)
			e.wantPrepared(undecided, true, true)
			if len(rec.Aborted) != 0 {
				t.Fatalf("xactl presumed abort of a live node's transaction: %v", rec.Aborted)
			}
			// By hand, past the log's grace (4 s): the rollback takes the
			// fence (an abort record, without the lease), and the node can
			// no longer commit it.
			time.Sleep(4500 * time.Millisecond)
			e.runWith(cfgA, "rollback", byHand.my.String()).want(t, 0)
			if err := a.LogCommit(e.ctx, byHand.record()); !errors.Is(err, xa.ErrAbortRecorded) {
				t.Fatalf("the node's commit after xactl rolled the branch back by hand: %v; want ErrAbortRecorded", err)
			}
			e.runWith(cfgA, "recover", "--takeover").want(t, 1).stderrHas(t, "held by node-a-process", "never taken over")

			var nodes nodesJSON
			e.runWith(cfgA, "-o", "json", "nodes").want(t, 3).json(t, &nodes)
			if len(nodes.Nodes) != 2 || nodes.Nodes[0].Node != nodeA || nodes.Nodes[0].State != sqllog.StateHeld || nodes.Nodes[0].Holder != "node-a-process" ||
				nodes.Nodes[0].Undecided == nil || *nodes.Nodes[0].Undecided != 2 || nodes.Nodes[1].State != sqllog.StateFree {
				t.Fatalf("xactl nodes: %+v; want A held by its process with 2 undecided branches (the pg branch of the one rolled back by hand is left), B free", nodes)
			}
			t.Log(e.runWith(cfgB, "nodes").stdout)

			// A's process dies: its lease expires by the database's clock.
			q := `UPDATE xa_log_leases SET expires_us = 0, ttl_us = 0 WHERE log_id = ?`
			if d == sqllog.Postgres {
				q = `UPDATE xa_log_leases SET expires_us = 0, ttl_us = 0 WHERE log_id = $1`
			}
			if _, err := db.Exec(q, id.String()); err != nil {
				t.Fatal(err)
			}
			r := e.runWith(cfgA, "doctor")
			if !strings.Contains(r.stdout, "lease of "+nodeA) || !strings.Contains(r.stdout, "expired") {
				t.Fatalf("doctor does not report the expired lease: %s", r)
			}
			var tk struct {
				Previous   string `json:"previous_holder"`
				By         string `json:"by"`
				RolledBack int    `json:"rolled_back"`
				Released   bool   `json:"released"`
			}
			e.runWith(cfgA, "-o", "json", "recover", "--takeover", "--reason", "node A's VM is gone").want(t, 0).json(t, &tk)
			if tk.Previous != "node-a-process" || !tk.Released || tk.RolledBack != 3 || !strings.Contains(tk.By, "node A's VM is gone") {
				t.Fatalf("recover --takeover: %+v; want A's log taken from its process, 3 branches rolled back, released", tk)
			}
			e.wantPrepared(undecided, false, false)
			e.wantPrepared(byHand, false, false)
			e.wantRows(undecided.k, false, false)
			// The dead node's process, had it only paused, can decide
			// nothing more.
			if err := a.LogCommit(context.Background(), undecided.record()); !errors.Is(err, xa.ErrFenced) {
				t.Fatalf("the old holder's commit after the takeover: %v; want ErrFenced", err)
			}
			e.runWith(cfgA, "-o", "json", "nodes").want(t, 0).json(t, &nodes)
			n := nodes.Nodes[0]
			if n.State != sqllog.StateFree || !n.Clean || n.Epoch != 2 || !strings.Contains(n.LastEvent, "release") {
				t.Fatalf("A's log after the takeover: %+v", n)
			}
			evs, err := s.Events(e.ctx, nodeA, 0)
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for _, ev := range evs {
				if ev.Action == "takeover" && strings.HasPrefix(ev.Holder, "xactl:") && strings.Contains(ev.Reason, "manual: xactl recover --takeover by ") &&
					strings.Contains(ev.Reason, "node A's VM is gone") && ev.Previous == "node-a-process" {
					found = true
					t.Logf("recorded: %s by %s: %s", ev.Action, ev.Holder, ev.Reason)
				}
			}
			if !found {
				t.Fatalf("the manual takeover is not recorded with who made it: %+v", evs)
			}
		})
	}
}
