package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadb/xa/internal/cli"
)

// TestSinkKafkaBacklog: xactl sink run, as users run it (the CLI itself,
// its configuration's defaults, no poll limit set by hand), drains a Kafka
// backlog of 200,000 records over 8 partitions (XA_SINK_BACKLOG sets
// another size, e.g. 1000000) with checkpoint.records 1000 and an
// interval long enough never to end a checkpoint: every checkpoint holds
// at most 1000 records (issue 18, item 1). Before, xactl built the Kafka
// source without a poll limit and one poll returned the whole buffer: one
// checkpoint of ~200,000 records. The test prints the heap's peak while
// the sink drains (the backlog itself lives in the in-process broker, so
// the heap before the run is printed too).
func TestSinkKafkaBacklog(t *testing.T) {
	backlog := 200_000
	if v := os.Getenv("XA_SINK_BACKLOG"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("XA_SINK_BACKLOG=%q: want a number of records", v)
		}
		backlog = n
	}
	const topic, partitions, perCheckpoint = "events", 8, 1000
	e := newSinkEnv(t)
	// The env's context lasts 3 minutes; a large backlog takes longer.
	long, cancel := context.WithTimeout(context.Background(), time.Duration(backlog/1000+300)*time.Second)
	defer cancel()
	e.ctx = long
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	produced := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 64)
	for from := 0; from < backlog; from += 10_000 {
		var recs []*kgo.Record
		for id := from; id < min(from+10_000, backlog); id++ {
			recs = append(recs, &kgo.Record{Partition: int32(id % partitions), Key: []byte(strconv.Itoa(id)),
				Value: fmt.Appendf(nil, `{"id":%d,"seq":%d,"v":"%s"}`, id, id/partitions, pad)})
		}
		if err := cl.ProduceSync(e.ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	t.Logf("%d records produced in %s", backlog, time.Since(produced).Round(time.Millisecond))

	cfg := e.sinkConfig("backlog.yaml", fmt.Sprintf("kind: kafka\nbrokers: [%s]\ngroup: g-%s\ntopics: [%s]", strings.Join(brokers, ", "), e.name, topic),
		fmt.Sprintf("    checkpoint: {records: %d, interval: 1h}\n", perCheckpoint))
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	var peak atomic.Uint64
	sampling, stopSampling := context.WithCancel(context.Background())
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampling.Done():
				return
			case <-t.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
			}
		}
	})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	started := time.Now()
	go func() {
		code <- cli.MainContext(ctx, []string{"--config", cfg, "sink", "run", e.name, "--progress-every", "5s", "-o", "json"}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(time.Duration(backlog/1000+120) * time.Second)
	for {
		my, _, pg, _ := e.rows()
		if my == backlog && pg == backlog {
			break
		}
		select {
		case c := <-code:
			t.Fatalf("sink run exited %d before writing %d rows:\n%s", c, backlog, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d and %d rows, want %d:\n%s", my, pg, backlog, stderr.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	drained := time.Since(started)
	stop()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("sink run exited %d after its interrupt:\n%s", c, stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("sink run did not stop within 90s of its interrupt:\n%s", stderr.String())
	}
	stopSampling()
	sampler.Wait()
	e.wantRowsOnce(backlog)

	var v struct {
		RecordsCommitted  int64 `json:"records_committed"`
		Checkpoints       int   `json:"checkpoints"`
		LargestCheckpoint int   `json:"largest_checkpoint"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &v); err != nil {
		t.Fatalf("sink run's -o json: %v:\n%s", err, stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	t.Logf("sink run's last lines:\n%s", strings.Join(lines[max(0, len(lines)-2):], "\n"))
	t.Logf("backlog %d records, checkpoint.records %d: %d checkpoints, the largest %d records; drained in %s (%.0f records/s); heap in use %d MiB before the run (the backlog is in the in-process broker), peak %d MiB while it ran",
		backlog, perCheckpoint, v.Checkpoints, v.LargestCheckpoint, drained.Round(time.Millisecond), float64(backlog)/drained.Seconds(), before>>20, peak.Load()>>20)
	if v.RecordsCommitted != int64(backlog) {
		t.Errorf("sink run committed %d records, want %d", v.RecordsCommitted, backlog)
	}
	if v.LargestCheckpoint > perCheckpoint || v.Checkpoints < backlog/perCheckpoint {
		t.Errorf("sink run committed %d checkpoints, the largest of %d records: want at least %d checkpoints of at most checkpoint.records = %d records each",
			v.Checkpoints, v.LargestCheckpoint, backlog/perCheckpoint, perCheckpoint)
	}
}

// TestSinkDeadLetters: xactl sink run with on_error: dead_letter over a
// file with a bad line between good ones (issue 18, item 2): it exits 0,
// the good lines land in both databases, the bad one is in the
// dead-letter table once, and sink run -o json, sink status and sink
// dead-letters count it.
func TestSinkDeadLetters(t *testing.T) {
	e := newSinkEnv(t)
	path := e.dir + "/events.ndjson"
	if err := os.WriteFile(path, []byte(`{"id": 1, "seq": 1}`+"\n"+`{"id": "one", "seq": 2`+"\n"+`{"id": 3, "seq": 3}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := e.sinkConfig("dl.yaml", "kind: file\npaths: ["+strconv.Quote(path)+"]", "    on_error: dead_letter\n")
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)
	r := e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0", "-o", "json").want(t, 0)
	var v struct {
		RecordsCommitted int64 `json:"records_committed"`
		DeadLetters      int64 `json:"dead_letters"`
	}
	r.json(t, &v)
	if v.RecordsCommitted != 3 || v.DeadLetters != 1 {
		t.Errorf("sink run: %s; want 3 records committed, 1 of them a dead letter", r)
	}
	r.stderrHas(t, "1 bad record set aside in the dead-letter table")
	e.wantRowsOnce(2)
	r = e.runWith(cfg, "sink", "dead-letters", e.name, "-o", "json").want(t, 0)
	var dl struct {
		DeadLetters []struct {
			Partition string `json:"partition"`
			Position  string `json:"position"`
			Value     []byte `json:"value"`
			Error     string `json:"error"`
		} `json:"dead_letters"`
	}
	r.json(t, &dl)
	if len(dl.DeadLetters) != 1 || dl.DeadLetters[0].Partition != path || dl.DeadLetters[0].Position != "43" ||
		string(dl.DeadLetters[0].Value) != `{"id": "one", "seq": 2` || !strings.Contains(dl.DeadLetters[0].Error, "not JSON") {
		t.Errorf("sink dead-letters: %s; want the bad line once, at position 43, not JSON", r)
	}
	t.Logf("sink dead-letters:\n%s", e.runWith(cfg, "sink", "dead-letters", e.name).want(t, 0).stdout)
	r = e.runWith(cfg, "sink", "status", e.name, "-o", "json").want(t, 0)
	var st struct {
		DeadLetters *int `json:"dead_letters"`
	}
	r.json(t, &st)
	if st.DeadLetters == nil || *st.DeadLetters != 1 {
		t.Errorf("sink status: %s; want dead_letters 1", r)
	}
}
