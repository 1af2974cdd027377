package bench

import (
	"context"
	"testing"
	"time"

	"github.com/xadb/xa/internal/lab/logbench"
	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/recovery/sqllog"
	"github.com/xadb/xa/xa"
)

// TestCompareShort runs the whole comparison briefly against the shared
// test servers (whose fsync-light settings make its figures meaningless):
// every mode must move money without an error or a half-applied transfer,
// and every round must yield a ratio. It keeps xalab bench from rotting.
// window is each mode's measuring time in these tests: long enough for a
// transfer to complete in every mode on a 2-core machine under the load of
// the whole suite (a 200 ms window saw none at a load average of 28).
const window = time.Second

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
	c, err := Compare(ctx, s, workers, window, rounds)
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

// TestCompareShortSQLLogs is TestCompareShort with the shared decision log
// in PostgreSQL and in MariaDB (the modes tm-sqllog-pg, tm-sqllog-maria),
// and the decision-log benchmark of those logs alone: every mode moves
// money without an error, and every log makes decisions.
func TestCompareShortSQLLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	l, err := CreateLog(t.TempDir()+"/log", filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const workers = 2
	s, err := Open(ctx, my.DSN(), pg.DSN(), workers, 10, l)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stores []logbench.Store
	for _, sl := range []struct {
		mode Mode
		kind string
		db   *dbtest.DB
	}{{SQLPostgres, logdb.Postgres, dbtest.PostgresDB(t)}, {SQLMySQL, logdb.MySQL, dbtest.MySQLDB(t)}} {
		db, d, err := logdb.Open(sl.kind, sl.db.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		st, err := sqllog.NewStore(db, d, sqllog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ident, err := xa.NewLogIdentity("bench-"+sl.kind, 0, 0, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		sql, err := st.Create(ctx, ident)
		if err != nil {
			t.Fatal(err)
		}
		defer sql.Close()
		if err := s.AddSQLLog(sl.mode, sql); err != nil {
			t.Fatal(err)
		}
		stores = append(stores, logbench.SQLStore("sqllog-"+sl.kind, sl.kind, sl.db.DSN()))
	}
	c, err := Compare(ctx, s, workers, window, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Best) != len(Modes)+2 {
		t.Fatalf("%d modes measured, want %d", len(c.Best), len(Modes)+2)
	}
	for _, st := range c.Best {
		if st.Ops == 0 || st.Errors != 0 {
			t.Errorf("%s: %d transfers, %d errors", st.Mode, st.Ops, st.Errors)
		}
	}
	if r := c.Ratio(SQLPostgres, TM); r <= 0 {
		t.Errorf("tm-sqllog-pg / tm = %v", r)
	}
	if err := c.CheckBalances(ctx, s); err != nil {
		t.Error(err)
	}
	res, err := logbench.Compare(ctx, stores, []int{1, 8}, logbench.Config{Dir: t.TempDir(), Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		t.Log(r)
		if r.Decisions == 0 || r.Syncs == 0 || r.AvgGroup <= 0 {
			t.Errorf("implausible result %+v", r)
		}
	}
}
