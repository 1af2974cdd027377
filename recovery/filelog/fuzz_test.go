package filelog

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xadb/xa/xa"
)

// seedSegment returns a valid segment 1 holding one record of each type.
func seedSegment(tb testing.TB) []byte {
	b := appendHeader(nil, 1)
	c, _ := commitRec(gid(1), 2).MarshalBinary()
	b = appendFrame(b, RecordCommit, c)
	h, _ := heurRec(2, xa.OutcomeRollback).MarshalBinary()
	b = appendFrame(b, RecordHeuristic, h)
	b = appendFrame(b, RecordForget, []byte(gid(1).String()))
	b = appendFrame(b, RecordClear, []byte(gid(2).Branch(0).String()))
	c, _ = commitRec(gid(3), 1).MarshalBinary()
	return appendFrame(b, RecordCommit, c)
}

// FuzzReplay: any bytes as a segment file. Nothing panics; Open either
// succeeds or fails with ErrCorrupt (and then changes nothing), agreeing
// with Verify; a log Open accepted reopens to the same state.
func FuzzReplay(f *testing.F) {
	seg := seedSegment(f)
	f.Add(seg)
	f.Add(appendHeader(nil, 1))
	f.Add(seg[:len(seg)-3])
	f.Add(append(slices.Clone(seg), make([]byte, 64)...))
	f.Add([]byte{})
	f.Add([]byte("xa-dlog\n"))
	bad := slices.Clone(seg)
	bad[headerSize+frameHeader+2] ^= 1 // the first record, with valid ones after it
	f.Add(bad)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, segmentName(1))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		nDump := 0
		if err := Dump(dir, func(Entry) error { nDump++; return nil }); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Dump: %v", err)
		}
		rep, verr := Verify(dir)
		if verr != nil && !errors.Is(verr, ErrCorrupt) {
			t.Fatalf("Verify: %v", verr)
		}
		if n := rep.Records.Commit + rep.Records.Forget + rep.Records.Heuristic + rep.Records.Clear; n != nDump {
			t.Fatalf("Verify counts %d records, Dump shows %d", n, nDump)
		}
		before := dirHashes(t, dir)
		l, err := Open(dir, Options{NoSync: true})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v, want nil or ErrCorrupt", err)
			}
			if verr == nil {
				t.Fatalf("Open says corrupt (%v), Verify did not", err)
			}
			if !maps.Equal(before, dirHashes(t, dir)) {
				t.Fatal("Open of a corrupt log modified it")
			}
			return
		}
		if verr != nil {
			t.Fatalf("Verify says corrupt (%v), Open did not", verr)
		}
		ctx := context.Background()
		c1, err := l.Commits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h1, err := l.Heuristics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(c1) != rep.LiveCommits || len(h1) != rep.LiveHeuristics {
			t.Fatalf("Open: %d commits, %d heuristics; Verify: %d, %d", len(c1), len(h1), rep.LiveCommits, rep.LiveHeuristics)
		}
		mustClose(t, l)
		if rep, err := Verify(dir); err != nil || rep.TornTail != nil {
			t.Fatalf("after Open: Verify %v, torn tail %+v", err, rep.TornTail)
		}
		l = mustOpen(t, dir, Options{NoSync: true})
		defer mustClose(t, l)
		c2, _ := l.Commits(ctx)
		h2, _ := l.Heuristics(ctx)
		if !slices.Equal(commitSet(t, c1), commitSet(t, c2)) || !slices.Equal(heurSet(t, h1), heurSet(t, h2)) {
			t.Fatal("reopening changed the live set")
		}
	})
}
