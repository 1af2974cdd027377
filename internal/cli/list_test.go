package cli_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/xa"
)

// foreign is the set of other applications' branches a test prepares: on
// MariaDB a binary XID, a near miss of ours (our format id, a gtrid with
// no valid transaction id) and a twin of ours (a gtrid and bqual of ours
// under another format id); on PostgreSQL a gid that is no XID at all and
// the near miss.
type foreign struct {
	my, myNear, myTwin xa.XID
	pgGID, pgNear      string
}

func (e *env) foreignBranches() foreign {
	e.t.Helper()
	g, err := xa.NewGlobalID(e.node, time.Now().Add(-time.Hour))
	if err != nil {
		e.t.Fatal(err)
	}
	f := foreign{
		my:     e.myForeign(101),
		myNear: e.myNearMiss(102),
		myTwin: xa.XID{FormatID: 1, Gtrid: g.Gtrid(), Bqual: []byte("0")},
		pgGID:  "someone-else-" + e.node,
		pgNear: fmt.Sprintf("%d:xa1.%s.bad:0", xa.FormatID, e.node),
	}
	e.myRawPrepare(f.myTwin.Gtrid, f.myTwin.Bqual, 1, 103)
	e.pgForeign(f.pgGID, 101)
	e.pgForeign(f.pgNear, 102)
	return f
}

// check verifies that the foreign branches are shown as not ours and were
// not touched.
func (f foreign) check(t *testing.T, bs []branchJSON) {
	t.Helper()
	views := []branchJSON{
		findBranch(t, bs, myName, f.my.String()),
		findBranch(t, bs, myName, f.myNear.String()),
		findBranch(t, bs, myName, f.myTwin.String()),
		findBranch(t, bs, pgName, f.pgGID),
		findBranch(t, bs, pgName, f.pgNear),
	}
	for _, v := range views {
		if v.Decision != "-" || v.Action != "none: not ours" || v.Node != "" || v.GlobalID != "" || v.Done || v.Error != "" {
			t.Errorf("foreign branch shown as %+v, want decision -, action 'none: not ours', no node, not done", v)
		}
	}
	if want := myLiteral(1, f.my.Gtrid, f.my.Bqual); views[0].Raw != want {
		t.Errorf("raw of the binary foreign XID = %q, want %q", views[0].Raw, want)
	}
	if views[3].XID != "" || views[3].Raw != f.pgGID {
		t.Errorf("a gid that is no XID is shown as xid %q raw %q, want no xid and raw %q", views[3].XID, views[3].Raw, f.pgGID)
	}
	if views[3].AgeSeconds == nil {
		t.Errorf("PostgreSQL says when %s was prepared, yet its age is not shown", f.pgGID)
	}
}

// stillPrepared checks with direct SQL that the foreign branches are
// prepared and their rows not committed.
func (f foreign) stillPrepared(e *env) {
	e.t.Helper()
	for _, x := range []xa.XID{f.my, f.myNear, f.myTwin} {
		if !e.myPrepared(x) {
			e.t.Errorf("foreign MariaDB branch %s is no longer prepared", x)
		}
	}
	for _, gid := range []string{f.pgGID, f.pgNear} {
		if !e.pgPrepared(gid) {
			e.t.Errorf("foreign PostgreSQL transaction %q is no longer prepared", gid)
		}
	}
	e.wantRows(101, false, false)
	e.wantRows(102, false, false)
	if e.myRow(103) {
		e.t.Error("the row of the foreign twin branch was committed")
	}
}

// TestList: list shows our in-doubt branches with the logged decision and
// what recovery would do (commit; wait inside the grace period; rollback
// after it), shows foreign and malformed ones as not ours, exits 3 while
// ours are in doubt, works while another process holds the decision log,
// and changes nothing.
func TestList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logged := e.prepare(1)
	orphan := e.prepare(2)
	prepared := time.Now()
	e.logCommit(logged.record())
	f := e.foreignBranches()

	release := e.holdLog() // a transaction manager runs with the log
	r := e.run("list", "--output", "json").want(t, 3)

	// The JSON shape scripts rely on.
	var shape map[string]json.RawMessage
	r.json(t, &shape)
	for _, k := range []string{"branches", "heuristics", "in_doubt", "errors"} {
		if _, ok := shape[k]; !ok {
			t.Errorf("list --output json lacks %q: %s", k, r.stdout)
		}
	}
	var out listJSON
	r.json(t, &out)
	if out.InDoubt == nil || *out.InDoubt != 4 {
		t.Errorf("in_doubt = %v, want 4 (two transactions of two branches): %s", out.InDoubt, r.stdout)
	}
	if len(out.Errors) != 0 || len(out.Heuristics) != 0 || out.Heuristics == nil {
		t.Errorf("errors %q, heuristics %v: want both empty (heuristics as [])", out.Errors, out.Heuristics)
	}
	for _, b := range []branchJSON{findBranch(t, out.Branches, myName, logged.my.String()), findBranch(t, out.Branches, pgName, logged.pg.String())} {
		if b.Decision != "commit" || b.Action != "commit" || b.GlobalID != logged.id.String() || b.Node != e.node || b.Done || b.AgeSeconds == nil {
			t.Errorf("branch with a logged commit shown as %+v", b)
		}
	}
	for _, b := range []branchJSON{findBranch(t, out.Branches, myName, orphan.my.String()), findBranch(t, out.Branches, pgName, orphan.pg.String())} {
		if b.Decision != "none" || !strings.HasPrefix(b.Action, "wait ") || !strings.Contains(b.Action, "grace") || b.Node != e.node || b.Done {
			t.Errorf("young branch without a record shown as %+v, want decision none, action wait (grace period)", b)
		}
	}
	f.check(t, out.Branches)

	// The table says the same to a human.
	r = e.run("list").want(t, 3)
	r.stdoutHas(t, "PARTICIPANT", "ACTION", logged.my.String(), logged.pg.String(), orphan.pg.String(), f.pgGID, f.my.String(), "not ours", "wait ")
	release()

	// Past the grace period, the branches without a record would be rolled
	// back (presumed abort).
	ageBeyond(prepared, time.Second)
	r = e.runWith(e.logGraceConfig(), "list", "-o", "json").want(t, 3)
	out = listJSON{}
	r.json(t, &out)
	for _, b := range []branchJSON{findBranch(t, out.Branches, myName, orphan.my.String()), findBranch(t, out.Branches, pgName, orphan.pg.String())} {
		if b.Decision != "none" || b.Action != "rollback (presumed abort)" || b.Done {
			t.Errorf("old branch without a record shown as %+v, want action rollback (presumed abort)", b)
		}
		if b.AgeSeconds == nil || *b.AgeSeconds < 1 {
			t.Errorf("age of %s = %v, want at least 1 s", b.XID, b.AgeSeconds)
		}
	}
	if *out.InDoubt != 4 {
		t.Errorf("in_doubt = %d, want 4", *out.InDoubt)
	}

	// list changed nothing.
	e.wantPrepared(logged, true, true)
	e.wantPrepared(orphan, true, true)
	e.wantRows(1, false, false)
	e.wantRows(2, false, false)
	f.stillPrepared(e)
	if live := e.liveRecords(); len(live) != 1 || live[0] != logged.id.String() {
		t.Errorf("live records after list = %v, want [%s]", live, logged.id)
	}
}

// TestListNothingInDoubt: with only other applications' branches on the
// participants, list shows them and exits 0.
func TestListNothingInDoubt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.foreignBranches()
	e.logCommit() // an empty log
	r := e.run("list", "-o", "json").want(t, 0)
	var out listJSON
	r.json(t, &out)
	if out.InDoubt == nil || *out.InDoubt != 0 {
		t.Errorf("in_doubt = %v, want 0", out.InDoubt)
	}
	f.check(t, out.Branches)
	for _, b := range out.Branches {
		if b.Node == e.node {
			t.Errorf("a branch of node %s listed: %+v", e.node, b)
		}
	}
	e.run("list").want(t, 0).stdoutHas(t, "not ours")
	f.stillPrepared(e)
}
