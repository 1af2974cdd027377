package bench

import (
	"context"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/filelog"
)

// TestCompareShort runs the whole comparison briefly against the shared
// test servers (whose fsync-light settings make its figures meaningless):
// every mode must move money without an error or a half-applied transfer,
// and every round must yield a ratio. It keeps xalab bench from rotting.
func TestCompareShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	l, err := CreateLog(t.TempDir()+"/log", filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const workers, rounds = 2, 2
	s, err := Open(ctx, my.DSN(), pg.DSN(), workers, 10, l)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := Compare(ctx, s, workers, 200*time.Millisecond, rounds)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rounds) != rounds || len(c.Best) != len(Modes) {
		t.Fatalf("%d rounds, %d best figures; want %d and %d", len(c.Rounds), len(c.Best), rounds, len(Modes))
	}
	for _, st := range c.Best {
		if st.Ops == 0 || st.Errors != 0 || st.P50 <= 0 || st.P99 < st.P50 {
			t.Errorf("%s: %d transfers, %d errors, p50 %s, p99 %s", st.Mode, st.Ops, st.Errors, st.P50, st.P99)
		}
	}
	for _, m := range []Mode{TM, Async, Last} {
		rs := c.RoundRatios(m, Raw)
		if len(rs) != rounds {
			t.Errorf("%s: %d round ratios, want %d", m, len(rs), rounds)
		}
		for i, r := range rs {
			if r <= 0 {
				t.Errorf("%s: round %d ratio to raw %v", m, i+1, r)
			}
		}
		if r := c.Ratio(m, Raw); r <= 0 {
			t.Errorf("%s: ratio to raw %v", m, r)
		}
	}
	if err := c.CheckBalances(ctx, s); err != nil {
		t.Error(err)
	}
}
