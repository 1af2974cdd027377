package recovery_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/internal/memrm"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// oldLog returns an in-memory log for node created age ago.
func oldLog(t *testing.T, node string, age time.Duration) *memrm.Log {
	t.Helper()
	ident, err := xa.NewLogIdentity(node, 0, 0, time.Now().Add(-age))
	if err != nil {
		t.Fatal(err)
	}
	return memrm.NewLogFor(ident)
}

// prepared leaves branch i of g prepared on rm, as a crashed coordinator
// would.
func prepared(t *testing.T, rm *memrm.RM, g xa.GlobalID, i int) xa.XID {
	t.Helper()
	ctx := context.Background()
	b, err := rm.Start(ctx, g.Branch(i))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.(*memrm.Branch).Put(ctx, i, i); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	return g.Branch(i)
}

// A record that names a participant the scanner does not know is kept and
// reported from the first scan on, even while its known branch is still
// prepared; its known branch is committed; foreign branches and other
// nodes' are left alone.
func TestScannerKeepsRecordOfUnknownParticipant(t *testing.T) {
	ctx := context.Background()
	db := memrm.NewDB()
	rm := memrm.New("maria", db, nil)
	log := oldLog(t, "n1", 2*time.Hour)
	g, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x := prepared(t, rm, g, 0)
	other, _ := xa.NewGlobalID("n2", time.Now().Add(-time.Hour))
	prepared(t, rm, other, 0)
	// A record of a transaction logged an hour ago (the log's clock is
	// set back for the write, which refuses decisions past the timeout).
	log.SetClock(func() time.Time { return g.Begun })
	if err := log.LogCommit(ctx, xa.CommitRecord{ID: g, Logged: g.Begun, Branches: []xa.BranchRecord{
		{RM: "maria", XID: x}, {RM: "oracle", XID: g.Branch(1)},
	}}); err != nil {
		t.Fatal(err)
	}
	log.SetClock(time.Now)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm}, Log: log, Nodes: []string{"n1"}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 1; pass <= 2; pass++ {
		rep, err := sc.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Kept) != 1 || !rep.Kept[0].Unseen || !strings.Contains(rep.Kept[0].Reason, `"oracle" is not configured`) {
			t.Fatalf("pass %d: kept = %+v", pass, rep.Kept)
		}
		if len(rep.Forgotten) != 0 {
			t.Fatalf("pass %d: forgot %v", pass, rep.Forgotten)
		}
		if pass == 1 {
			verdicts := map[recovery.Verdict]int{}
			for _, b := range rep.Branches {
				verdicts[b.Verdict]++
			}
			if verdicts[recovery.Commit] != 1 || verdicts[recovery.OtherNode] != 1 {
				t.Fatalf("verdicts %v", verdicts)
			}
		}
	}
	if v, ok := db.Get(0); !ok || v != 0 {
		t.Fatal("the known branch was not committed")
	}
	if len(db.Prepared()) != 1 {
		t.Fatalf("prepared now %v; want only the other node's branch", db.Prepared())
	}
}
