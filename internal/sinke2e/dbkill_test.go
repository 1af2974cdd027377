package sinke2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
)

// TestKillDatabase: a database server is killed with SIGKILL while the sink
// process is held at a step of a checkpoint — MariaDB or PostgreSQL while
// it prepares, MariaDB (which holds the bookkeeping) while the decision
// goes to it or just after it committed the decision, MariaDB or
// PostgreSQL while its branch commits — then the process goes on against
// the dead server, and the server is started again on the same data. The
// sink process either recovers by itself or fails, and then a new process
// is started; either way restore finishes what the crash left (prepared
// branches survive a server crash) and at the end of each case, every
// record is in both databases exactly once. The servers are private to the
// test; the cases run one after another on one sink.
//
// It runs twice: with the bookkeeping in MariaDB (where the decision's
// round trip can be held too), and in PostgreSQL.
func TestKillDatabase(t *testing.T) {
	mySrv := dbtest.NewMySQLServer(t)
	pgSrv := dbtest.NewPostgresServer(t)
	prepare := []dbCase{
		{"maria killed during pre-commit", hookRule{Target: tgMy, Match: "XA PREPARE"}, mySrv},
		{"pg killed during pre-commit", hookRule{Target: tgPg, Match: "PREPARE TRANSACTION"}, pgSrv},
	}
	commit := []dbCase{
		{"maria killed during commit", hookRule{Target: tgMy, Match: "XA COMMIT"}, mySrv},
		{"pg killed during commit", hookRule{Target: tgPg, Match: "COMMIT PREPARED"}, pgSrv},
	}
	decide := []dbCase{
		{"maria killed as the decision goes to it", hookRule{Target: tgMy, Match: "UPDATE xa_sink_progress SET position"}, mySrv},
		{"maria killed after committing the decision, before its reply", hookRule{Target: tgMy, Match: "UPDATE xa_sink_progress SET position", Reply: true, Drop: true}, mySrv},
	}
	t.Run("progress-in-maria", func(t *testing.T) {
		killDatabase(t, mySrv, pgSrv, tgMy, slices.Concat(prepare, decide, commit))
	})
	t.Run("progress-in-pg", func(t *testing.T) {
		killDatabase(t, mySrv, pgSrv, tgPg, slices.Concat(prepare, commit))
	})
}

// dbCase is a database killed at a step.
type dbCase struct {
	name string
	rule hookRule
	srv  *dbtest.Server
}

func killDatabase(t *testing.T, mySrv, pgSrv *dbtest.Server, progress string, cases []dbCase) {
	r := newRig(t, rigOpts{progress: progress, my: mySrv.CreateDB(t), pg: pgSrv.CreateDB(t)})
	ctx := ctxFor(t, 10*time.Minute)
	var report []string
	for i, c := range cases {
		if _, err := r.produce(ctx, 3000); err != nil {
			t.Fatal(err)
		}
		spec := r.spec
		rule := c.rule
		rule.Name, rule.N = c.name, 3
		spec.Rule = &rule
		w := r.start(spec)
		waitHook(t, r, w, time.Minute)
		c.srv.Kill(t)
		killed := time.Now()
		w.release()
		// The process goes on against the dead server for a while.
		deadline := time.Now().Add(3 * time.Second)
		for w.alive() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		c.srv.Start(t)
		down := time.Since(killed)
		first := "recovered by itself once the server was back"
		procs := []*proc{w}
		if !w.alive() {
			first = "failed: " + w.exitLine()
			w = r.startRetrying()
			procs = append(procs, w)
		}
		r.drain(2 * time.Minute)
		if !w.alive() {
			t.Fatalf("case %q: the worker ended: %s\n%s", c.name, w.exitLine(), w.tail(40))
		}
		w.stop()
		r.checkExactlyOnce(r.next.Load())
		var restores []string
		for _, p := range procs {
			for _, l := range p.grep(`msg="sink: restore"`) {
				restores = append(restores, logValue(l, "checkpoint")+" "+logValue(l, "action"))
			}
		}
		report = append(report, fmt.Sprintf("%d. %s (server down %v): the held process %s; restore: %s",
			i+1, c.name, down.Round(time.Millisecond), first, strings.Join(restores, ", ")))
	}
	for _, l := range report {
		t.Log(l)
	}
}

// startRetrying starts a worker, again if it fails to open the sink (a
// server still recovering).
func (r *rig) startRetrying() *proc {
	r.t.Helper()
	for attempt := 1; ; attempt++ {
		w := r.start(r.spec)
		waitFor(r.t, time.Minute, w.name+" ready", func() bool { return !w.alive() || w.has("ready ") })
		if w.alive() {
			return w
		}
		if attempt == 5 {
			r.t.Fatalf("no worker could start: %s\n%s", w.exitLine(), w.tail(20))
		}
		time.Sleep(time.Second)
	}
}
