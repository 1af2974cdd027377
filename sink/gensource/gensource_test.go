package gensource

import (
	"context"
	"errors"
	"io"
	"maps"
	"reflect"
	"testing"
)

type assignAll struct{ pos map[string]string }

func (a assignAll) Assigned(ctx context.Context, parts []string) (map[string]string, error) {
	return maps.Clone(a.pos), nil
}
func (assignAll) Revoked(ctx context.Context, parts []string) error { return nil }

func drain(t *testing.T, s *Source) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for {
		recs, err := s.Poll(context.Background())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out[r.Partition] = append(out[r.Partition], string(r.Key)+"@"+r.Next)
		}
	}
}

// TestGenerator: every id once over the partitions, in order per
// partition; read again from a position, the same records.
func TestGenerator(t *testing.T) {
	cfg := Config{Records: 103, Partitions: 4, Batch: 10}
	s := New(cfg)
	s.Start(context.Background(), assignAll{})
	all := drain(t, s)
	seen := map[string]bool{}
	n := 0
	for p := range 4 {
		recs := all[cfg.Partition(p)]
		if len(recs) != cfg.Len(p) {
			t.Fatalf("partition %d: %d records, want %d", p, len(recs), cfg.Len(p))
		}
		for _, r := range recs {
			seen[r] = true
			n++
		}
	}
	if n != 103 || len(seen) != 103 {
		t.Fatalf("%d records, %d distinct", n, len(seen))
	}
	r := cfg.Record(2, 5)
	if string(r.Key) != "22" || r.Next != "6" || string(r.Value) != `{"id":22,"p":2,"seq":5,"v":""}` || !r.Time.Equal(Base.Add(22e6)) {
		t.Fatalf("record 5 of partition 2: %+v", r)
	}
	// Replay partition 1 from position 7, the others from the start.
	s2 := New(cfg)
	s2.Start(context.Background(), assignAll{pos: map[string]string{cfg.Partition(1): "7"}})
	again := drain(t, s2)
	if !reflect.DeepEqual(again[cfg.Partition(1)], all[cfg.Partition(1)][7:]) || !reflect.DeepEqual(again[cfg.Partition(0)], all[cfg.Partition(0)]) {
		t.Fatalf("replay differs: %v", again)
	}
	if err := s2.Seek(context.Background(), map[string]string{cfg.Partition(3): ""}); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s2); !reflect.DeepEqual(got[cfg.Partition(3)], all[cfg.Partition(3)]) || len(got) != 1 {
		t.Fatalf("after Seek to the start: %v", got)
	}
	for _, bad := range []map[string]string{{"gen/9": "1"}, {"gen/1": "x"}, {"gen/1": "999"}, {"gen/01": "1"}} {
		if err := s2.Seek(context.Background(), bad); err == nil {
			t.Errorf("Seek(%v) accepted", bad)
		}
	}
}
