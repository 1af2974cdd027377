package logbench

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestCompare(t *testing.T) {
	res, err := Compare(context.Background(), DefaultStores(), []int{1, 8}, Config{Dir: t.TempDir(), Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want 4", len(res))
	}
	for _, r := range res {
		t.Log(r)
		if r.Decisions == 0 || r.PerSecond <= 0 || r.Syncs == 0 || r.AvgGroup <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("implausible result %+v", r)
		}
		if r.Filesystem == "" || r.Filesystem == "unknown" {
			t.Errorf("file system not named: %+v", r)
		}
	}
}

func TestRunMakesExactlyN(t *testing.T) {
	for _, s := range DefaultStores() {
		lg, closer, err := s.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		lat, err := Run(context.Background(), lg, 7, 100)
		if err != nil || len(lat) != 100 {
			t.Errorf("%s: %d decisions, %v; want 100", s.Name, len(lat), err)
		}
		if err := closer.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRecordIsValid(t *testing.T) {
	rec, err := Record(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.MarshalBinary(); err != nil || len(rec.Branches) != 2 {
		t.Fatalf("Record: %v, %d branches", err, len(rec.Branches))
	}
}

// TestDiskBound: the disk probe runs in the same slices as the logs, one
// writer whatever the row's, and gives a bound for every writer count.
func TestDiskBound(t *testing.T) {
	res, err := Compare(context.Background(), DefaultStores()[:1], []int{1, 4}, Config{Dir: t.TempDir(), Duration: 100 * time.Millisecond, Disk: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want 4", len(res))
	}
	for _, w := range []int{1, 4} {
		b := Bound(res, w)
		for _, r := range res {
			if r.Store == DiskName && r.Writers == w {
				t.Logf("writers %d: a synchronous write takes %v, bound %.0f/s", w, r.SyncTime(), b)
				if r.SyncTime() <= 0 || b != float64(w)/r.SyncTime().Seconds() {
					t.Errorf("writers %d: sync time %v, bound %v", w, r.SyncTime(), b)
				}
			}
		}
		if b <= 0 {
			t.Errorf("no bound for %d writers", w)
		}
	}
}
