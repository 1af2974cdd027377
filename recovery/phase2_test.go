package recovery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// finishedMeanwhile is a participant on which somebody else (the
// coordinator, another scanner) commits a branch between the scan's
// listing and its commit: the scan's commit then answers "unknown XID".
type finishedMeanwhile struct{ *memrm.RM }

func (rm finishedMeanwhile) Commit(ctx context.Context, x xa.XID, from xa.Origin) error {
	if err := rm.RM.Commit(ctx, x, from); err != nil {
		return err
	}
	return fmt.Errorf("commit %s: %w", x, xa.ErrUnknownXID)
}

// The scanner's commit runs through xa's phase-2 kernel with the commit
// record as its proof: "unknown XID" on a branch with a commit decision
// counts as committed (done, no error).
func TestScannerCommitUnknownXIDIsProven(t *testing.T) {
	ctx := context.Background()
	db := memrm.NewDB()
	rm := finishedMeanwhile{memrm.New("maria", db, nil)}
	log := oldLog(t, "n1", 2*time.Hour)
	g, _ := xa.NewGlobalID("n1", time.Now().Add(-time.Hour))
	x := prepared(t, rm.RM, g, 0)
	log.SetClock(func() time.Time { return g.Begun })
	if err := log.LogCommit(ctx, xa.CommitRecord{ID: g, Logged: g.Begun, Branches: []xa.BranchRecord{{RM: "maria", XID: x}}}); err != nil {
		t.Fatal(err)
	}
	log.SetClock(time.Now)
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{rm}, Log: log, Nodes: []string{"n1"}, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sc.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Branches) != 1 {
		t.Fatalf("branches = %+v", rep.Branches)
	}
	if b := rep.Branches[0]; b.Verdict != recovery.Commit || !b.Done || b.Err != nil {
		t.Fatalf("branch = %v, done %v, err %v; want committed, done, no error (the commit record proves it)", b.Verdict, b.Done, b.Err)
	}
}
