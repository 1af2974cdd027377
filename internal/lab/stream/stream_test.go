package stream

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
)

// TestWorker streams records through the sink in process (no crash) and
// checks that every record lands in both databases exactly once and that
// the progress rows reach the end offsets.
func TestWorker(t *testing.T) {
	ctx := context.Background()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	kafka, err := StartKafka()
	if err != nil {
		t.Fatal(err)
	}
	defer kafka.Close()
	brokers := kafka.ListenAddrs()
	if err := Setup(ctx, my.DSN(), pg.DSN()); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	if _, err := Produce(ctx, brokers, 0, n, 500, 0); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- RunWorker(wctx, WorkerConfig{MySQLDSN: my.DSN(), PGDSN: pg.DSN(), Brokers: brokers, CheckpointRecords: 1000, CheckpointInterval: 200 * time.Millisecond}, &syncBuf{b: &out})
	}()
	ends, err := EndOffsets(ctx, brokers)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := Read(ctx, my.DSN(), pg.DSN())
		if err != nil {
			t.Fatal(err)
		}
		if st.Caught(ends) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not caught up: %v vs %v", st.Positions, ends)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("worker:\n%s", out.String())
	st, err := Read(ctx, my.DSN(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Check(n, ends); err != nil {
		t.Fatal(err)
	}
}

type syncBuf struct {
	b *bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { return s.b.Write(p) }
