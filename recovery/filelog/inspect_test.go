package filelog

import (
	"context"
	"maps"
	"testing"

	"github.com/xadb/xa/xa"
)

func TestVerifyAndDump(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	steps := []step{
		{op: "commit", i: 1, n: 2}, {op: "commit", i: 2, n: 1}, {op: "heuristic", i: 3, act: xa.OutcomeCommit},
		{op: "commit", i: 4, n: 3}, {op: "clear", i: 3}, {op: "commit", i: 5, n: 1},
		{op: "forget", i: 2}, {op: "heuristic", i: 6, act: xa.OutcomeRollback},
	}
	// The forget rides the last group: nothing is written after it.
	for _, s := range steps {
		apply(t, ctx, l, s)
	}

	// While the log is open: readable, and said to be in use.
	before := dirHashes(t, dir)
	rep, err := Verify(dir)
	if err != nil {
		t.Fatalf("Verify of an open log: %v", err)
	}
	if !rep.InUse {
		t.Error("Verify of an open log does not say it is in use")
	}
	var types []RecordType
	if err := Dump(dir, func(e Entry) error { types = append(types, e.Type); return nil }); err != nil {
		t.Fatalf("Dump of an open log: %v", err)
	}
	if len(types) < len(steps) {
		t.Errorf("Dump of an open log shows %d records, want at least %d", len(types), len(steps))
	}
	if !maps.Equal(before, dirHashes(t, dir)) {
		t.Fatal("Verify or Dump modified an open log")
	}
	mustClose(t, l)

	rep, err = Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := RecordCounts{Commit: 4, Forget: 1, Heuristic: 2, Clear: 1}
	if rep.InUse || rep.Records != want || rep.LiveCommits != 3 || rep.LiveHeuristics != 1 || rep.TornTail != nil || len(rep.Corruption) != 0 {
		t.Errorf("Verify = %+v; want counts %+v, 3 live commits, 1 live heuristic, no damage", rep, want)
	}
	n := 0
	for _, s := range rep.Segments {
		n += s.Records
		if s.File != segmentName(s.Number) || s.Size < headerSize {
			t.Errorf("segment %+v", s)
		}
	}
	if n != 8 {
		t.Errorf("segments hold %d records, want 8", n)
	}

	// Dump: every record in order, with positions and payloads.
	var got []Entry
	if err := Dump(dir, func(e Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Fatalf("Dump shows %d records, want 8", len(got))
	}
	for i, e := range got {
		if i > 0 {
			p := got[i-1]
			if e.Segment < p.Segment || e.Segment == p.Segment && e.Offset != p.Offset+int64(p.Size) {
				t.Errorf("record %d at %s:%d does not follow %s:%d+%d", i, e.File, e.Offset, p.File, p.Offset, p.Size)
			}
		} else if e.Offset != headerSize {
			t.Errorf("first record at offset %d", e.Offset)
		}
	}
	if e := got[0]; e.Type != RecordCommit || enc(t, e.Commit) != enc(t, commitRec(gid(1), 2)) || e.ID != gid(1) {
		t.Errorf("first entry %+v", e)
	}
	if e := got[2]; e.Type != RecordHeuristic || enc(t, e.Heuristic) != enc(t, heurRec(3, xa.OutcomeCommit)) || !e.XID.Equal(gid(3).Branch(0)) {
		t.Errorf("third entry %+v", e)
	}
	if e := got[4]; e.Type != RecordClear || !e.XID.Equal(gid(3).Branch(0)) {
		t.Errorf("fifth entry %+v", e)
	}
	if e := got[6]; e.Type != RecordForget || e.ID != gid(2) {
		t.Errorf("seventh entry %+v", e)
	}

	// Dump stops at the callback's error.
	stop := errStopTest
	calls := 0
	if err := Dump(dir, func(Entry) error { calls++; return stop }); err != stop || calls != 1 {
		t.Errorf("Dump with a failing callback: %v after %d calls", err, calls)
	}
}

var errStopTest = &CorruptError{Reason: "not really"}

func TestVerifyMissingDir(t *testing.T) {
	if _, err := Verify(t.TempDir() + "/nope"); err == nil {
		t.Error("Verify of a missing directory succeeded")
	}
	if err := Dump(t.TempDir()+"/nope", func(Entry) error { return nil }); err == nil {
		t.Error("Dump of a missing directory succeeded")
	}
}
