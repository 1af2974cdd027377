package filesource

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/xadb/xa/sink"
)

type assign struct{ pos map[string]string }

func (a assign) Assigned(ctx context.Context, parts []string) (map[string]string, error) {
	return maps.Clone(a.pos), nil
}
func (assign) Revoked(ctx context.Context, parts []string) error { return nil }

func drain(t *testing.T, s *Source) []sink.Record {
	t.Helper()
	var out []sink.Record
	for {
		recs, err := s.Poll(context.Background())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
	}
}

// TestFileSource: one record per non-empty line, positions are the byte
// offsets after each line, a last line without its line break is not a
// record (it may be half written: issue 13) until the break is there, and
// reading again from a position yields the rest.
func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.ndjson")
	b := filepath.Join(dir, "b.ndjson")
	os.WriteFile(a, []byte("{\"n\":1}\n\n{\"n\":2}\r\n{\"n\":3}"), 0o644)
	os.WriteFile(b, []byte("{\"m\":1}\n"), 0o644)
	s, err := New(Config{Files: []string{a, b}, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Start(context.Background(), assign{})
	recs := drain(t, s)
	var got []string
	for _, r := range recs {
		got = append(got, filepath.Base(r.Partition)+":"+string(r.Value)+"@"+r.Next)
	}
	want := map[string]bool{`a.ndjson:{"n":1}@8`: true, `a.ndjson:{"n":2}@18`: true, `b.ndjson:{"m":1}@8`: true}
	if len(got) != len(want) {
		t.Fatalf("records %v", got)
	}
	for _, g := range got {
		if !want[g] {
			t.Fatalf("record %s not expected; all: %v", g, got)
		}
	}
	if u := s.Unterminated(); len(u) != 1 || u[a] != [2]int64{18, 7} {
		t.Fatalf("unterminated lines: %v, want %s at 18, 7 bytes", u, a)
	}
	// The writer finishes the line.
	f, err := os.OpenFile(a, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\n")
	f.Close()
	s2, _ := New(Config{Files: []string{a, b}})
	defer s2.Close()
	s2.Start(context.Background(), assign{pos: map[string]string{a: "18", b: "8"}})
	rest := drain(t, s2)
	if len(rest) != 1 || string(rest[0].Value) != `{"n":3}` || rest[0].Next != "26" {
		t.Fatalf("from 18: %+v", rest)
	}
	if u := s2.Unterminated(); len(u) != 0 {
		t.Fatalf("unterminated lines: %v, want none", u)
	}
	if err := s2.Seek(context.Background(), map[string]string{a: "-1"}); err == nil {
		t.Fatal("a negative position was accepted")
	}
	if _, err := New(Config{Files: []string{a, a}}); err == nil {
		t.Fatal("a file twice was accepted")
	}
	long, _ := New(Config{Files: []string{a}, MaxLine: 4})
	defer long.Close()
	long.Start(context.Background(), assign{})
	if _, err := long.Poll(context.Background()); err == nil {
		t.Fatal("a line above MaxLine was accepted")
	}
}

// TestRemaining checks that Remaining counts the records past a position
// as the source reads them: non-empty lines, not a last one without its
// line break (sink status's lag of a file source is in records).
func TestRemaining(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.ndjson")
	// Records end at offsets 4 and 13 (after an empty line and a blank
	// one); {c} has no line break yet: no record.
	if err := os.WriteFile(path, []byte("{a}\n\n  \n{b}\r\n{c}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pos  string
		want int64
	}{{"", 2}, {"4", 1}, {"5", 1}, {"13", 0}, {"16", 0}, {"99", 0}} {
		n, err := Remaining(path, c.pos)
		if err != nil || n != c.want {
			t.Errorf("Remaining after %q: %d, %v; want %d", c.pos, n, err, c.want)
		}
	}
	if _, err := Remaining(path, "x"); err == nil {
		t.Error("Remaining after position x: no error")
	}
}
