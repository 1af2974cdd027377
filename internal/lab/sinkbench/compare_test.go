package sinkbench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
)

// minRatio is how far below the baseline the sink may fall in the short
// comparison before it fails: far below the target (0.9 on durable
// servers, see xalab bench sink), because the shared test servers skip
// fsync (which favours the mode with more transactions, the baseline) and
// share the machine with other tests. It catches a sink that went
// pathologically slow (a round trip per row, a checkpoint stalling the
// writes), not a few per cent.
const minRatio = 0.5

// TestCompareShort loads a few seconds' worth of records per mode into
// every target against the shared test servers: every mode must land
// every record exactly once (Measure checks it), and the sink's best
// records/s must be a sane fraction of the baseline's. It is not a timed
// test of an absolute speed, and it keeps xalab bench sink from rotting.
func TestCompareShort(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds per mode")
	}
	ctx := context.Background()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	s, err := Open(ctx, Config{MySQLDSN: my.DSN(), PostgresDSN: pg.DSN(), Partitions: 2, Batch: 1000, CeilingBatch: 10000, Interval: 500 * time.Millisecond, NoSettle: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	records, err := Calibrate(ctx, s, Targets, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 2
	c, err := Compare(ctx, s, Targets, records, rounds, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rounds) != rounds || len(c.Best) != len(Targets)*len(Modes) {
		t.Fatalf("%d rounds, %d best figures; want %d and %d", len(c.Rounds), len(c.Best), rounds, len(Targets)*len(Modes))
	}
	for _, st := range c.Best {
		t.Logf("%-8s %-8s %7d records in %v: %8.0f records/s, %d commits", st.Target, st.Mode, st.Records, st.Elapsed.Round(time.Millisecond), st.PerSecond, st.Commits)
		if st.PerSecond <= 0 || st.Commits == 0 {
			t.Errorf("%s into %s: %.0f records/s, %d commits", st.Mode, st.Target, st.PerSecond, st.Commits)
		}
	}
	for _, tg := range Targets {
		for _, m := range []Mode{Sink, SinkDeadLetter} {
			rs := c.RoundRatios(tg, m, Batch)
			t.Logf("%s: %s/batch %.2f, round by round %.2f; ceiling/batch %.2f", tg, m, c.Ratio(tg, m, Batch), rs, c.Ratio(tg, Ceiling, Batch))
			// The best round: a busy machine slows one mode of a round
			// down as easily as the other.
			if slices.Max(rs) < minRatio {
				t.Errorf("%s: %s did at most %.2f of the baseline's records/s in a round (round by round %.2f), below %.2f", tg, m, slices.Max(rs), rs, minRatio)
			}
		}
	}
}
