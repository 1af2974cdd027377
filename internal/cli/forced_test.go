package cli_test

import (
	"testing"
	"time"
)

// TestRecoverLeavesSiblingOfForcedCommit: xactl commit --force of one
// branch of an undecided transaction, then xactl rollback of its sibling is
// refused ("the outcome would be mixed"), and xactl recover leaves the
// sibling prepared and says why (exit 3) instead of presuming abort; a
// forced commit of the sibling ends it. (Found by review: recover rolled
// the sibling back, "MariaDB row 7 committed, PostgreSQL row 7 gone".)
func TestRecoverLeavesSiblingOfForcedCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mixed := e.prepare(7)
	prepared := time.Now()
	e.waitDetached(mixed)
	ageBeyond(prepared, time.Second)
	cfg := e.logGraceConfig()

	e.runWith(cfg, "commit", mixed.my.String(), "--force", "--reason", "customer paid").want(t, 0)
	r := e.runWith(cfg, "rollback", mixed.pg.String())
	r.want(t, 1)
	r.stderrHas(t, "mixed")
	e.wantRows(7, true, false)

	r = e.runWith(cfg, "recover")
	t.Logf("xactl recover: %s", r)
	if !e.pgRow(7) && !e.pgPrepared(mixed.pg.String()) {
		t.Fatalf("xactl recover rolled back %s although its sibling %s was committed by hand (heuristic record; "+
			"xactl rollback of it was refused as mixed): MariaDB row 7 committed, PostgreSQL row 7 gone", mixed.pg, mixed.my)
	}
	r.want(t, 3)
	r.stdoutHas(t, "committed by hand")
	e.runWith(cfg, "commit", mixed.pg.String(), "--force", "--reason", "match the hand commit").want(t, 0)
	e.wantRows(7, true, true)
}
