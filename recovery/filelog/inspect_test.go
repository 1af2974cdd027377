package filelog

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/xadb/xa/xa"
)

func TestVerifyAndDump(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{})
	steps := []step{
		{op: "commit", i: 1, n: 2}, {op: "commit", i: 2, n: 1}, {op: "heuristic", i: 3, act: xa.OutcomeCommit},
		{op: "commit", i: 4, n: 3}, {op: "clear", i: 3}, {op: "commit", i: 5, n: 1},
		{op: "abort", i: 7}, {op: "delegation", rm: "maria"}, {op: "abort", i: 8},
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
	if len(types) < len(steps)+1 {
		t.Errorf("Dump of an open log shows %d entries, want at least %d", len(types), len(steps)+1)
	}
	if !maps.Equal(before, dirHashes(t, dir)) {
		t.Fatal("Verify or Dump modified an open log")
	}
	mustClose(t, l)

	rep, err = Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := RecordCounts{Commit: 4, Forget: 1, Heuristic: 2, Clear: 1, Abort: 2, Delegation: 1}
	if rep.InUse || rep.Records != want || rep.LiveCommits != 3 || rep.LiveHeuristics != 1 || rep.LiveAborts != 2 ||
		rep.Delegations != 1 || rep.TornTail != nil || len(rep.Corruption) != 0 {
		t.Errorf("Verify = %+v; want counts %+v, 3 live commits, 1 live heuristic, 2 aborts, 1 delegation, no damage", rep, want)
	}
	if !sameIdentity(rep.Identity, testIdent) {
		t.Errorf("Verify: identity %+v, want %+v", rep.Identity, testIdent)
	}
	n := 0
	for _, s := range rep.Segments {
		n += s.Records
		if s.File != segmentName(s.Number) || s.Size < headerSize {
			t.Errorf("segment %+v", s)
		}
	}
	if n != len(steps) || rep.Records.Total() != n {
		t.Errorf("segments hold %d records, Total says %d, want %d", n, rep.Records.Total(), len(steps))
	}

	// Dump: the identity, then every record in order, with positions,
	// payloads and liveness.
	var got []Entry
	if err := Dump(dir, func(e Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(steps)+1 {
		t.Fatalf("Dump shows %d entries, want %d", len(got), len(steps)+1)
	}
	if e := got[0]; e.Type != RecordIdentity || e.File != identityName || !e.Live || !sameIdentity(e.Identity, testIdent) {
		t.Errorf("first entry %+v, want the identity", e)
	}
	got = got[1:]
	// DumpAll adds the sync marks (one in each batch after the first, and
	// one at Close), which Verify counts apart: with them, each record
	// follows the one before, and each mark covers what precedes it.
	var all []Entry
	if err := DumpAll(dir, func(e Entry) error { all = append(all, e); return nil }); err != nil {
		t.Fatal(err)
	}
	all = all[1:]
	if marks := len(all) - len(got); marks != rep.SyncMarks || marks < 2 || marks > len(steps) {
		t.Errorf("DumpAll shows %d sync marks, Verify counts %d; want 2 to %d", marks, rep.SyncMarks, len(steps))
	}
	for i, e := range all {
		if i > 0 {
			p := all[i-1]
			if e.Segment < p.Segment || e.Segment == p.Segment && e.Offset != p.Offset+int64(p.Size) {
				t.Errorf("record %d at %s:%d does not follow %s:%d+%d", i, e.File, e.Offset, p.File, p.Offset, p.Size)
			}
		} else if e.Offset != headerSize {
			t.Errorf("first record at offset %d", e.Offset)
		}
		if e.Type == RecordSynced && (e.Live || e.Synced > e.Offset || e.Synced <= headerSize) {
			t.Errorf("sync mark %+v", e)
		}
	}
	if e := all[len(all)-1]; e.Type != RecordSynced || e.Synced != e.Offset {
		t.Errorf("the closed log does not end with a sync mark covering all before it: %+v", e)
	}
	if e := got[0]; e.Type != RecordCommit || enc(t, e.Commit) != enc(t, commitRec(gid(1), 2)) || e.ID != gid(1) || !e.Live {
		t.Errorf("first record %+v", e)
	}
	if e := got[1]; e.Type != RecordCommit || e.ID != gid(2) || e.Live {
		t.Errorf("second record %+v; want the forgotten commit, not live", e)
	}
	if e := got[2]; e.Type != RecordHeuristic || enc(t, e.Heuristic) != enc(t, heurRec(3, xa.OutcomeCommit)) || !e.XID.Equal(gid(3).Branch(0)) || e.RM != "db-0" || e.Live {
		t.Errorf("third record %+v; want the cleared heuristic", e)
	}
	if e := got[4]; e.Type != RecordClear || !e.XID.Equal(gid(3).Branch(0)) || e.RM != "db-0" || e.Live {
		t.Errorf("fifth record %+v", e)
	}
	if e := got[6]; e.Type != RecordAbort || e.ID != gid(7) || e.Abort.ID != gid(7) || !e.Abort.Logged.Equal(testStart) || !e.Live {
		t.Errorf("seventh record %+v", e)
	}
	if e := got[7]; e.Type != RecordDelegation || e.Delegation.Participant != "maria" || !e.Delegation.Logged.Equal(testStart) || !e.Live {
		t.Errorf("eighth record %+v", e)
	}
	if e := got[9]; e.Type != RecordForget || e.ID != gid(2) || e.Live {
		t.Errorf("tenth record %+v", e)
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
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := Verify(missing); !errors.Is(err, ErrNoLog) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Verify of a missing directory: %v, want ErrNoLog and fs.ErrNotExist", err)
	}
	if err := Dump(missing, func(Entry) error { return nil }); !errors.Is(err, ErrNoLog) {
		t.Errorf("Dump of a missing directory: %v, want ErrNoLog", err)
	}
	if _, err := ReadSnapshot(missing); !errors.Is(err, ErrNoLog) {
		t.Errorf("ReadSnapshot of a missing directory: %v, want ErrNoLog", err)
	}
	empty := t.TempDir()
	if _, err := Verify(empty); !errors.Is(err, ErrNoLog) {
		t.Errorf("Verify of an empty directory: %v, want ErrNoLog", err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("Verify created %v", entries)
	}
}

// TestDumpLiveAcrossCompaction: when compaction has copied a record forward
// and the old segment is still there (its removal failed, or a crash came
// first), Dump marks the copy live and the original not; once the record
// is forgotten, neither.
func TestDumpLiveAcrossCompaction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := &hookFS{}
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op == "remove" && name == segmentName(1) {
			return errors.New("injected: segment 1 stays")
		}
		return nil
	})
	l := mustCreate(t, dir, Options{fs: h, NoSync: true, SegmentSize: 1024})
	apply(t, ctx, l, step{op: "commit", i: 1, n: 2})
	apply(t, ctx, l, step{op: "abort", i: 2})
	apply(t, ctx, l, step{op: "delegation", rm: "maria"})
	apply(t, ctx, l, step{op: "heuristic", i: 3, act: xa.OutcomeRollback})
	// Fill and rotate until the live records of segment 1 have been
	// copied forward.
	for i := 10; len(segFiles(t, dir)) < minSegments+3; i++ {
		apply(t, ctx, l, step{op: "commit", i: i, n: 3})
		apply(t, ctx, l, step{op: "forget", i: i})
	}
	mustClose(t, l)
	if _, err := os.Stat(filepath.Join(dir, segmentName(1))); err != nil {
		t.Fatal(err)
	}
	count := func() (copies map[RecordType]int, live map[RecordType]int) {
		copies, live = map[RecordType]int{}, map[RecordType]int{}
		if err := Dump(dir, func(e Entry) error {
			if e.ID == gid(1) || e.ID == gid(2) || e.Type == RecordDelegation || e.Type == RecordHeuristic {
				if e.Type != RecordForget && e.Type != RecordForgetAbort {
					copies[e.Type]++
				}
				if e.Live {
					live[e.Type]++
					if e.Segment == 1 {
						t.Errorf("%v record in segment 1 is marked live, its copy is newer", e.Type)
					}
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return copies, live
	}
	copies, live := count()
	for _, typ := range []RecordType{RecordCommit, RecordAbort, RecordDelegation, RecordHeuristic} {
		if copies[typ] < 2 || live[typ] != 1 {
			t.Errorf("%v: %d copies, %d live; want at least 2 copies, 1 live", typ, copies[typ], live[typ])
		}
	}
	l = mustOpen(t, dir, Options{NoSync: true})
	apply(t, ctx, l, step{op: "forget", i: 1})
	apply(t, ctx, l, step{op: "clear", i: 3})
	mustClose(t, l)
	if _, live := count(); live[RecordCommit] != 0 || live[RecordHeuristic] != 0 || live[RecordAbort] != 1 || live[RecordDelegation] != 1 {
		t.Errorf("after forget and clear: live %v; want the abort and the delegation only", live)
	}
}

// TestDumpShowsLinks: Dump shows each segment's link record first, naming
// the previous segment and its length, never live; Verify counts them and
// shows HEAD.
func TestDumpShowsLinks(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 20)
	segs := segFiles(t, dir)
	sizes := map[uint64]int64{}
	for _, s := range segs {
		st, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := parseSegmentName(filepath.Base(s))
		sizes[n] = st.Size()
	}
	var links []Entry
	first := map[uint64]RecordType{}
	if err := Dump(dir, func(e Entry) error {
		if _, ok := first[e.Segment]; !ok && e.Type != RecordIdentity {
			first[e.Segment] = e.Type
		}
		if e.Type == RecordLink {
			links = append(links, e)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(links) != len(segs)-1 {
		t.Fatalf("%d link records for %d segments", len(links), len(segs))
	}
	for _, e := range links {
		if first[e.Segment] != RecordLink || e.Offset != headerSize || e.Live ||
			e.Link.Segment != e.Segment-1 || e.Link.Size != sizes[e.Segment-1] || e.Type.String() != "link" {
			t.Errorf("link entry %+v; previous segment is %d bytes", e, sizes[e.Segment-1])
		}
	}
	if first[1] == RecordLink {
		t.Error("segment 1 starts with a link record")
	}
	rep, err := Verify(dir)
	newest, _ := parseSegmentName(filepath.Base(segs[len(segs)-1]))
	if err != nil || rep.Records.Link != len(segs)-1 || rep.Head == nil || *rep.Head != (Head{Newest: newest, First: 1}) {
		t.Fatalf("Verify: %v, links %d, HEAD %+v", err, rep.Records.Link, rep.Head)
	}
}
