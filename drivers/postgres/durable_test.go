package postgres

import (
	"fmt"
	"testing"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// The decisions this participant stores are durable whatever
// synchronous_commit says. With it off (for the database, as deployments
// set it for speed, or SET LOCAL inside the branch, which the session
// accepts), a COMMIT answers before its WAL is written; the WAL writer runs
// only every wal_writer_delay (10 s here). A last-resource commit is the
// decision of the whole transaction — the other branches commit on its
// strength — and an abort marker is the fence presumed abort rolls back
// behind: each is killed with the server right after it answered, and must
// be there after the restart. (Before the fix the decision row, the
// branch's work and the marker were all gone: 3 of 3.)
func TestDecisionsDurableWhateverTheSessionSays(t *testing.T) {
	t.Parallel()
	srv := dbtest.NewPostgresServer(t, dbtest.Setting("wal_writer_delay", "10000"))
	db := srv.CreateDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)")
	open := func() *RM {
		rm := openRMWith(t, Config{DSN: db.DSN(), DecisionTable: "xa_decisions"})
		return rm
	}
	open().Close()
	mustExec(t, db, fmt.Sprintf("ALTER DATABASE %q SET synchronous_commit = off", db.Name), "CHECKPOINT")

	for i, how := range []string{"database", "SET LOCAL in the branch", "database, again"} {
		rm := open()
		ctx := testCtx(t)
		g, rec := lastRecord(t)
		b, s := start(t, rm, ctx, g.Branch(1))
		if how == "SET LOCAL in the branch" {
			exec(t, s, "SET LOCAL synchronous_commit = off")
		}
		var sc string
		if err := s.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&sc); err != nil || sc != "off" {
			t.Fatalf("%s: synchronous_commit in the branch = %q, %v; want off", how, sc, err)
		}
		exec(t, s, "INSERT INTO kv VALUES ($1, $1)", i+1)
		if err := b.CommitLast(ctx, rec); err != nil {
			t.Fatalf("%s: CommitLast: %v", how, err)
		}
		// And a fence: an abort marker for another transaction.
		fenced, _ := lastRecord(t)
		if err := rm.ClaimAbort(ctx, fenced, "test"); err != nil {
			t.Fatalf("%s: ClaimAbort: %v", how, err)
		}
		srv.Kill(t)
		srv.Start(t)
		rm.Close()

		rm = open()
		if _, ok, err := rm.Decision(ctx, g); err != nil || !ok {
			t.Fatalf("%s: after a crash right after the last resource's commit answered, its decision is gone (%v, %v): "+
				"the transaction was reported committed and its other branches commit on the strength of that row", how, ok, err)
		}
		wantValue(t, db, i+1, i+1)
		if err := rm.ClaimAbort(ctx, fenced, "again"); err != nil {
			t.Fatalf("%s: the abort marker claimed before the crash: %v", how, err)
		}
		if _, ok, _ := rm.Decision(ctx, fenced); ok {
			t.Fatalf("%s: a commit decision for the fenced transaction", how)
		}
		var aborted bool
		if err := raw(t, db).QueryRow(ctx, "SELECT aborted FROM xa_decisions WHERE gtrid = $1", fenced.String()).Scan(&aborted); err != nil || !aborted {
			t.Fatalf("%s: the abort marker claimed before the crash is gone (%v, %v): recovery rolled back behind a fence that no longer stands", how, aborted, err)
		}
		rm.Close()
	}
	// The start-up check reports the weakened setting.
	rm := open()
	fs, _ := rm.Check(testCtx(t))
	if f := finding(fs, "synchronous_commit"); f.Severity != xa.SeverityWarn || f.Value != "off" || f.Fix == "" {
		t.Fatalf("Check's synchronous_commit finding = %+v; want a warning with the fix", f)
	}
}
