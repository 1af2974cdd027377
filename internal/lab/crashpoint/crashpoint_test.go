package crashpoint

import (
	"context"
	"testing"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

func TestParse(t *testing.T) {
	for _, bad := range []string{"log", "log:0", "flush:1", "commit:x"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestFiresOnNthPass(t *testing.T) {
	tr, err := Parse("commit:2")
	if err != nil {
		t.Fatal(err)
	}
	fired := 0
	tr.Kill = func() { fired++ }
	rm := tr.WrapRM(memrm.New("a", memrm.NewDB(), nil))
	log := tr.WrapLog(memrm.NewLog("n"))
	mgr, _ := xa.NewManager(xa.Config{Node: "n", Log: log})
	rm2 := tr.WrapRM(memrm.New("b", memrm.NewDB(), nil))
	for i := 0; i < 3; i++ {
		_, err := mgr.Run(context.Background(), func(ctx context.Context, tx *xa.Tx) error {
			for _, r := range []xa.ResourceManager{rm, rm2} {
				s, err := tx.Enlist(ctx, r)
				if err != nil {
					return err
				}
				if err := s.(*memrm.Branch).Put(ctx, i, i); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if fired != 1 || tr.seen["commit"] != 6 || tr.seen["prepare"] != 6 || tr.seen["log"] != 3 {
		t.Fatalf("fired %d, seen %v", fired, tr.seen)
	}
}
