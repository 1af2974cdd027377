package labcli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/xadb/xa/internal/lab/labcli"
	"github.com/xadb/xa/internal/testrig/dbtest"
)

// TestMain makes the test binary xalab when it is started as the demo's
// coordinator or sink process (the demo runs its own executable's
// bank-worker and sink-worker).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "bank-worker" || os.Args[1] == "sink-worker") {
		os.Exit(labcli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	dbtest.Main(m)
}

type result struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("xalab %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

func xalab(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := labcli.MainContext(context.Background(), args, &out, &errb)
	return result{args: args, code: code, stdout: out.String(), stderr: errb.String()}
}

func (r result) want(t *testing.T, code int, stdout ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got %s", code, r)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout lacks %q: %s", s, r)
		}
	}
}

// TestUsage: the lab's commands, the hidden worker, and usage errors.
func TestUsage(t *testing.T) {
	t.Parallel()
	r := xalab(t, "--help")
	r.want(t, 0, "demo", "bench")
	if strings.Contains(r.stdout, "bank-worker") || strings.Contains(r.stdout, "sink-worker") {
		t.Errorf("the workers are hidden: %s", r)
	}
	xalab(t, "bench", "--help").want(t, 0, "sink")
	xalab(t, "bench", "sink", "--targets", "oracle").want(t, 2)
	xalab(t, "bench", "sink", "--partitions", "0").want(t, 2)
	xalab(t, "sink-worker").want(t, 2) // required flags
	xalab(t, "demo", "--sink-crash-at", "0").want(t, 2)
	xalab(t, "demo", "--mysql-dsn", "x").want(t, 2)
	xalab(t, "demo", "--crash-after", "0").want(t, 2)
	xalab(t, "demo", "--no-such-flag").want(t, 2)
	xalab(t, "bench", "--postgres-dsn", "x").want(t, 2)
	xalab(t, "bank-worker").want(t, 2) // required flags
	xalab(t, "no-such-command").want(t, 2)
}

// TestDemo runs the demo on the test servers: the coordinator is killed,
// xactl (in process) lists and recovers, and the checks pass.
func TestDemo(t *testing.T) {
	t.Parallel()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	r := xalab(t, "demo", "--mysql-dsn", my.DSN(), "--postgres-dsn", pg.DSN(),
		"--accounts", "6", "--workers", "4", "--crash-after", "20", "--tx-timeout", "1s", "--sink-records", "10000")
	r.want(t, 0,
		"$ xactl log init --timeout 1s",
		"created the decision log in",
		"the coordinator died of SIGKILL after reporting",
		"$ xactl list",
		"of ours in doubt.",
		"with a durable commit decision",
		"$ xactl recover    (round 1, exit",
		"every in-doubt branch resolved, every decision record forgotten",
		"in only one: 0: ok",
		"missing: 0: ok",
		"the transfers' invariants hold",
		"streaming records from Kafka into both databases with the exactly-once sink",
		"$ xactl sink setup demo",
		"the sink died of SIGKILL after 3 checkpoints committed",
		"checkpoint #4 is in MariaDB only, so far",
		"$ xactl sink status demo",
		"decided commit  commit: its checkpoint is decided",
		"restore: demo/1/4@postgres: commit (its checkpoint is decided)",
		"every partition's progress reached Kafka's end offset",
		"MariaDB events: 10000 rows, 10000 distinct records (ids 0 to 9999), amounts summing to 505000: ok",
		"PostgreSQL events: 10000 rows, 10000 distinct records (ids 0 to 9999), amounts summing to 505000: ok",
		"prepared transactions left: 0 in MariaDB, 0 in PostgreSQL: ok",
		"All invariants hold",
	)
	if strings.Contains(r.stdout, "FAILED") {
		t.Errorf("a check failed: %s", r)
	}
}

// TestBench runs the benchmark briefly, so that it does not rot (its
// figures on the test servers mean nothing).
func TestBench(t *testing.T) {
	t.Parallel()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	r := xalab(t, "bench", "--mysql-dsn", my.DSN(), "--postgres-dsn", pg.DSN(),
		"--workers", "2", "--duration", "100ms", "--rounds", "1", "--dir", t.TempDir())
	r.want(t, 0, "MODE", "tm-last", "ratio to raw", "decision log alone", "filelog", "pebble")
}

// TestBenchScale runs the scaling benchmark briefly, with every number of
// participants, so that it does not rot (its figures on the test servers
// mean nothing).
func TestBenchScale(t *testing.T) {
	t.Parallel()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	t.Cleanup(func() {
		// The databases of the extra participants, made by the benchmark.
		ctx := context.Background()
		my.Server.Exec(ctx, "", "DROP DATABASE IF EXISTS "+my.Name+"_p3")              //nolint:errcheck
		pg.Server.Exec(ctx, "", "DROP DATABASE IF EXISTS "+pg.Name+"_p4 WITH (FORCE)") //nolint:errcheck
	})
	r := xalab(t, "bench", "scale", "--mysql-dsn", my.DSN(), "--postgres-dsn", pg.DSN(),
		"--workers", "1,2", "--participants", "2,3,4", "--participant-workers", "2",
		"--duration", "100ms", "--rounds", "1", "--dir", t.TempDir())
	r.want(t, 0, "WORKERS", "PARTICIPANTS", "TM/RAW", "CPU TM/RAW", "LAST/RAW")
	if n := strings.Count(r.stdout, "\n2 "); n != 3 { // rows of 2 workers: 2, 3 and 4 participants
		t.Errorf("%d rows for 2 workers, want 3:\n%s", n, r.stdout)
	}
	xalab(t, "bench", "scale", "--participants", "5").want(t, 2)
}

// TestBenchSink runs the sink benchmark briefly, so that it does not rot.
func TestBenchSink(t *testing.T) {
	t.Parallel()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	r := xalab(t, "bench", "sink", "--mysql-dsn", my.DSN(), "--postgres-dsn", pg.DSN(),
		"--records", "4000", "--rounds", "2", "--partitions", "2", "--batch", "500", "--ceiling-batch", "2000", "--interval", "200ms")
	r.want(t, 0, "TARGET", "ceiling", "SINK/BATCH", "what 1000 records cost", "CPU MARIADB")
}
