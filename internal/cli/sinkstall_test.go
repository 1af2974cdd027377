package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xadb/xa/internal/cli"
)

// frozenSink runs xactl sink run over an in-process Kafka topic of two
// partitions until its first 20 records landed, then freezes its group:
// the broker answers the instance's heartbeats with UNKNOWN_MEMBER_ID (it
// is out of the group, its partitions lost) and never answers a
// JoinGroup or SyncGroup, so the group never completes a rebalance, as
// in issue 18's ten-minute rebalance; then 20 more records wait. extra
// are more settings of the sink. It returns the environment, the
// configuration, the run's exit code, its stderr, and its interrupt.
func frozenSink(t *testing.T, extra string) (*sinkEnv, string, <-chan int, *syncBuffer, context.CancelFunc) {
	t.Helper()
	const topic = "events"
	e := newSinkEnv(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	produce := func(from int) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var recs []*kgo.Record
		for id := from; id < from+20; id++ {
			recs = append(recs, &kgo.Record{Partition: int32(id % 2), Key: []byte(strconv.Itoa(id)), Value: fmt.Appendf(nil, `{"id":%d,"seq":%d}`, id, id/2)})
		}
		if err := cl.ProduceSync(e.ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0)
	group := "g-" + e.name
	cfg := e.sinkConfig("stall.yaml", fmt.Sprintf("kind: kafka\nbrokers: [%s]\ngroup: %s\ntopics: [%s]\nsession_timeout: 6s\nrebalance_timeout: 2s",
		strings.Join(brokers, ", "), group, topic), "    checkpoint: {records: 100, interval: 200ms}\n"+extra)
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)

	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	stderr := &syncBuffer{}
	code := make(chan int, 1)
	go func() {
		var stdout syncBuffer
		code <- cli.MainContext(ctx, []string{"--config", cfg, "sink", "run", e.name, "--progress-every", "500ms", "--metrics-addr", "127.0.0.1:0"}, &stdout, stderr)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		my, _, pg, _ := e.rows()
		if my == 20 && pg == 20 {
			break
		}
		select {
		case c := <-code:
			t.Fatalf("sink run exited %d before writing 20 rows:\n%s", c, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d and %d rows after 60s, want 20:\n%s", my, pg, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The fault: the group never settles again.
	cluster.ControlKey(kmsg.Heartbeat.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		hb := req.(*kmsg.HeartbeatRequest)
		if hb.Group != group {
			return nil, nil, false
		}
		resp := hb.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	// A JoinGroup comes once the instance has lost its partitions (kgo
	// calls OnPartitionsLost before it rejoins): the records produced
	// after it wait.
	rejoining := make(chan struct{})
	var once sync.Once
	for _, key := range []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup} {
		cluster.ControlKey(key.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			cluster.KeepControl()
			once.Do(func() { close(rejoining) })
			return nil, nil, true // never answered
		})
	}
	select {
	case <-rejoining:
	case <-time.After(30 * time.Second):
		t.Fatalf("the instance did not rejoin its group within 30s of the freeze:\n%s", stderr.String())
	}
	produce(20)
	return e, cfg, code, stderr, stop
}

// TestSinkStall: an instance whose group is frozen (frozenSink) with
// records waiting reports a stall once stall_after has passed without a
// committed checkpoint, a warning with "stalled since", the metric
// xa_sink_stalled at 1, and "stalled since" in xactl sink status for the
// waiting partitions; past stall_exit it exits 1, for its supervisor to
// start it again (issue 18, item 5).
func TestSinkStall(t *testing.T) {
	e, cfg, code, stderr, _ := frozenSink(t, "    stall_after: 2s\n    stall_exit: 12s\n    shutdown_timeout: 5s\n")
	frozen := time.Now()
	deadline := frozen.Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "stalled since") {
		select {
		case c := <-code:
			t.Fatalf("sink run exited %d before reporting its stall:\n%s", c, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stall reported 30s after the group froze:\n%s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("stall reported %s after the group froze", time.Since(frozen).Round(time.Millisecond))

	addr := regexp.MustCompile(`metrics on (http://\S+/metrics)`).FindStringSubmatch(stderr.String())
	if addr == nil {
		t.Fatalf("sink run did not say where its metrics are:\n%s", stderr.String())
	}
	resp, err := http.Get(addr[1])
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`xa_sink_stalled{sink="%s"} 1`, e.name); !strings.Contains(string(b), want) {
		t.Errorf("metrics lack %s:\n%s", want, b)
	}

	st := e.runWith(cfg, "sink", "status", e.name, "-o", "json").want(t, 0)
	var v struct {
		StalledSince string   `json:"stalled_since"`
		Stalled      []string `json:"stalled"`
		Partitions   []struct {
			Partition    string `json:"partition"`
			StalledSince string `json:"stalled_since"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &v); err != nil {
		t.Fatalf("sink status -o json: %v:\n%s", err, st.stdout)
	}
	if v.StalledSince == "" || len(v.Stalled) != 2 {
		t.Errorf("sink status: stalled_since %q, stalled %v; want both partitions stalled:\n%s", v.StalledSince, v.Stalled, st.stdout)
	}
	for _, p := range v.Partitions {
		if p.StalledSince == "" {
			t.Errorf("sink status: partition %s not stalled:\n%s", p.Partition, st.stdout)
		}
	}
	e.runWith(cfg, "sink", "status", e.name).want(t, 0).stdoutHas(t, "STALLED since")

	select {
	case c := <-code:
		if c != 1 {
			t.Fatalf("sink run exited %d on its stall, want 1:\n%s", c, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("sink run still runs 60s after its stall report (stall_exit 12s, shutdown_timeout 5s):\n%s", stderr.String())
	}
	t.Logf("sink run exited %s after the group froze; its last lines:\n%s", time.Since(frozen).Round(time.Millisecond), lastLines(stderr.String(), 3))
	if !strings.Contains(stderr.String(), "stall_exit 12s") {
		t.Errorf("sink run's exit does not say it stalled past stall_exit:\n%s", stderr.String())
	}
	my, _, pg, _ := e.rows()
	if my != 20 || pg != 20 {
		t.Errorf("%d and %d rows, want the 20 committed before the freeze", my, pg)
	}
}

// TestSinkStopFrozenGroup: SIGTERM (the run's context ends as Main's does
// on SIGTERM) ends xactl sink run within shutdown_timeout while its group
// is frozen (frozenSink): exit 1 with a message once shutdown_timeout has
// passed, if the run has not stopped by itself before (issue 18, item 5:
// an instance did not end 60 s after SIGTERM).
func TestSinkStopFrozenGroup(t *testing.T) {
	const bound = 4 * time.Second
	_, _, code, stderr, stop := frozenSink(t, fmt.Sprintf("    shutdown_timeout: %s\n", bound))
	time.Sleep(3 * time.Second) // the instance is out of the group, rejoining
	stop()
	stopped := time.Now()
	select {
	case c := <-code:
		took := time.Since(stopped)
		t.Logf("sink run exited %d %s after its interrupt; its last lines:\n%s", c, took.Round(time.Millisecond), lastLines(stderr.String(), 3))
		if took > bound+3*time.Second {
			t.Errorf("sink run took %s to exit, past shutdown_timeout %s", took, bound)
		}
		if c != 0 && !strings.Contains(stderr.String(), "did not stop within shutdown_timeout") {
			t.Errorf("sink run exited %d without saying why:\n%s", c, stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("sink run still runs 90s after its interrupt (shutdown_timeout %s):\n%s", bound, stderr.String())
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
