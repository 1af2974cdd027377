package cli_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// buildXactl builds cmd/xactl as users build it (go build) into the
// test's directory and returns its path.
func buildXactl(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "xactl")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/xadb/xa/cmd/xactl").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/xactl: %v\n%s", err, out)
	}
	return bin
}

// TestSinkKillDeadLetters (issue 18, item 2: "the bad one is in the
// dead-letter table once, across a SIGKILL in the checkpoint that holds
// it"): xactl, built with go build, runs sink run with on_error:
// dead_letter over a Kafka topic of 4 partitions (kfake, in this process)
// in which every fifth record of each partition is bad (not JSON, a
// fraction for the BIGINT seq, or a value too long for its column, which
// the databases refuse), while records keep coming. It is killed
// with SIGKILL XA_SINK_KILLS times (default 5), each time once a
// checkpoint is prepared on PostgreSQL (a checkpoint in flight, which
// holds bad records: each holds five or more records of a partition), or
// after 5 s if none is seen; then restarted. A last instance drains the
// topic and is stopped with SIGTERM. Then each database holds every good
// record's row exactly once (the events table has no unique key: a
// duplicate would show as a second row), no bad record's row, rows of
// every partition; the dead-letter table holds every bad record exactly
// once (by partition and position); no prepared branch is left.
func TestSinkKillDeadLetters(t *testing.T) {
	kills := 5
	if v := os.Getenv("XA_SINK_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("XA_SINK_KILLS=%q: want a number of kills", v)
		}
		kills = n
	}
	const topic, parts = "events", 4
	e := newSinkEnv(t)
	long, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e.ctx = long
	// No unique key: a record written twice is two rows.
	for _, x := range []struct {
		exec func(...string) error
	}{
		{func(q ...string) error { return e.my.Server.Exec(e.ctx, e.my.Name, q...) }},
		{func(q ...string) error { return e.pg.Server.Exec(e.ctx, e.pg.Name, q...) }},
	} {
		if err := x.exec("DROP TABLE events", "CREATE TABLE events (id BIGINT NOT NULL, p VARCHAR(64) NOT NULL, seq BIGINT, body VARCHAR(40))"); err != nil {
			t.Fatal(err)
		}
	}
	xactl := buildXactl(t, e.dir)

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// Record id goes to partition id % 4; it is bad when id % 5 == 0
	// (so every fifth record of each partition): not JSON when id % 10
	// == 0, a fraction for the BIGINT seq when id % 20 == 5 (both
	// mapping errors), and when id % 20 == 15 a value too long for the
	// body column, VARCHAR(40) (the whole value, $): a row both databases
	// refuse, which the sink narrows its batch to.
	bad := func(id int) bool { return id%5 == 0 }
	var produced atomic.Int64
	produce := func(n int) {
		t.Helper()
		from := int(produced.Load())
		var recs []*kgo.Record
		for id := from; id < from+n; id++ {
			v := fmt.Appendf(nil, `{"id":%d,"seq":%d}`, id, id)
			switch {
			case id%10 == 0:
				v = fmt.Appendf(nil, `not json %d`, id)
			case id%20 == 15:
				v = fmt.Appendf(nil, `{"id":%d,"seq":%d,"pad":"%s"}`, id, id, strings.Repeat("x", 40))
			case bad(id):
				v = fmt.Appendf(nil, `{"id":%d,"seq":%d.5}`, id, id)
			}
			recs = append(recs, &kgo.Record{Partition: int32(id % parts), Key: []byte(strconv.Itoa(id)), Value: v})
		}
		if err := prod.ProduceSync(e.ctx, recs...).FirstErr(); err != nil {
			t.Error(err)
			return
		}
		produced.Add(int64(n))
	}
	produce(400)
	stopProducing := make(chan struct{})
	var producer sync.WaitGroup
	producer.Go(func() {
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopProducing:
				return
			case <-tk.C:
				produce(20)
			}
		}
	})
	defer func() {
		select {
		case <-stopProducing:
		default:
			close(stopProducing)
		}
		producer.Wait()
	}()

	cfg := e.sinkConfig("kill.yaml", fmt.Sprintf("kind: kafka\nbrokers: [%s]\ngroup: g-%s\ntopics: [%s]\nsession_timeout: 6s\nrebalance_timeout: 2s",
		strings.Join(brokers, ", "), e.name, topic), "    on_error: dead_letter\n    checkpoint: {records: 200, interval: 100ms}\n")
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)

	// watch is a session of its own on PostgreSQL, polled in a tight loop
	// for the sink's prepared branches.
	watch := e.pgConn()
	defer watch.Close(context.Background())
	prepared := func() int {
		var n int
		if err := watch.QueryRow(e.ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	start := func() (*exec.Cmd, *syncBuffer, chan error) {
		t.Helper()
		stderr := &syncBuffer{}
		cmd := exec.Command(xactl, "--config", cfg, "sink", "run", e.name, "--progress-every", "0")
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, stderr, done
	}
	// running waits until the instance wrote rows of its own.
	running := func(done chan error, stderr *syncBuffer) {
		t.Helper()
		before, _, _, _ := e.rows()
		deadline := time.Now().Add(90 * time.Second)
		for {
			if my, _, _, _ := e.rows(); my > before {
				return
			}
			select {
			case err := <-done:
				t.Fatalf("sink run ended (%v) before writing:\n%s", err, stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("sink run wrote nothing in 90 s:\n%s", stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	inFlight := 0
	for k := range kills {
		cmd, stderr, done := start()
		running(done, stderr)
		time.Sleep(time.Duration(rand.IntN(700)) * time.Millisecond)
		seen := false
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if prepared() > 0 {
				seen = true
				break
			}
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v:\n%s", k+1, err, stderr.String())
		}
		err := <-done
		if seen {
			inFlight++
		}
		my, _, pg, _ := e.rows()
		t.Logf("kill %d (%v): a checkpoint prepared on PostgreSQL at the kill: %v; %d and %d rows so far, %d records produced", k+1, err, seen, my, pg, produced.Load())
	}
	close(stopProducing)
	producer.Wait()
	total := int(produced.Load())
	goods, bads, maxGood := 0, 0, -1
	for id := range total {
		if bad(id) {
			bads++
		} else {
			goods++
			maxGood = id
		}
	}

	cmd, stderr, done := start()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		my, _, pg, _ := e.rows()
		if my >= goods && pg >= goods && prepared() == 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the last sink run ended (%v) with %d and %d rows of %d:\n%s", err, my, pg, goods, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d and %d rows after 3 minutes, want %d:\n%s", my, pg, goods, stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Let a checkpoint or two more go by (nothing is left to write), then
	// stop it as a supervisor does.
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the last sink run, stopped with SIGTERM: %v:\n%s", err, stderr.String())
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill() //nolint:errcheck
		t.Fatalf("the last sink run did not end within 90 s of SIGTERM:\n%s", stderr.String())
	}

	// Every good record once, no bad one, every partition.
	const q = "SELECT count(*), count(DISTINCT id), COALESCE(SUM(CASE WHEN MOD(id, 5) = 0 THEN 1 ELSE 0 END), 0), count(DISTINCT p), COALESCE(max(id), -1) FROM events"
	type tally struct{ rows, ids, bad, parts, max int }
	var my, pg tally
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRowContext(e.ctx, q).Scan(&my.rows, &my.ids, &my.bad, &my.parts, &my.max); err != nil {
		t.Fatal(err)
	}
	c := e.pgConn()
	defer c.Close(context.Background())
	if err := c.QueryRow(e.ctx, q).Scan(&pg.rows, &pg.ids, &pg.bad, &pg.parts, &pg.max); err != nil {
		t.Fatal(err)
	}
	want := tally{goods, goods, 0, parts, maxGood}
	if my != want || pg != want {
		t.Errorf("events: MariaDB %+v, PostgreSQL %+v; want %+v (every good record once, no bad one, all %d partitions)", my, pg, want, parts)
	}
	// Every bad record once in the dead-letter table (in the progress
	// target, MariaDB).
	var dl, dlDistinct int
	if err := db.QueryRowContext(e.ctx, "SELECT count(*), count(DISTINCT `partition`, position) FROM xa_sink_dead_letters WHERE sink = ?", e.name).
		Scan(&dl, &dlDistinct); err != nil {
		t.Fatal(err)
	}
	if dl != bads || dlDistinct != bads {
		t.Errorf("dead letters: %d rows, %d distinct records; want each of the %d bad records once", dl, dlDistinct, bads)
	}
	if n := prepared(); n != 0 {
		t.Errorf("%d prepared branches left on PostgreSQL", n)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d kills with SIGKILL (%d of them with a checkpoint prepared on PostgreSQL); %d records over %d partitions: %d good, each once in both databases; %d bad, each once in the dead-letter table",
		kills, inFlight, total, parts, goods, bads)
	if inFlight == 0 {
		t.Errorf("no kill landed with a checkpoint in flight")
	}
}
