package filelog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xadb/xa/xa"
)

// buildLog writes n live commit records into dir with a small segment size,
// so that the log has several segments, then 6 more into the last one, and
// closes it.
func buildLog(t *testing.T, dir string, n int) []xa.CommitRecord {
	t.Helper()
	l := mustCreate(t, dir, Options{NoSync: true, SegmentSize: 1500})
	var recs []xa.CommitRecord
	for i := range n {
		rec := commitRec(gid(i), 2)
		if err := l.LogCommit(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	mustClose(t, l)
	// A few more into the last segment, without rotating.
	l = mustOpen(t, dir, Options{NoSync: true})
	for i := n; i < n+6; i++ {
		rec := commitRec(gid(i), 2)
		if err := l.LogCommit(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	mustClose(t, l)
	if len(segFiles(t, dir)) < 3 {
		t.Fatalf("want at least 3 segments, have %d", len(segFiles(t, dir)))
	}
	return recs
}

func rewrite(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCorruption(t *testing.T) {
	// Each case damages the log and returns the file and offset that the
	// error must name.
	tests := []struct {
		name   string
		damage func(t *testing.T, segs []string) (file string, off int64)
		reason string // part of the reason
	}{
		{
			name: "byte flipped in a record in the middle of the last segment",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				offs, _ := frames(t, last)
				k := offs[len(offs)/2]
				rewrite(t, last, func(b []byte) []byte { b[k+frameHeader+3] ^= 0x40; return b })
				return last, int64(k)
			},
			reason: "checksum mismatch, but a valid record follows",
		},
		{
			name: "the last decision of a closed log damaged",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				offs, _ := frames(t, last)
				k := offs[len(offs)-2] // before the sync mark Close wrote
				rewrite(t, last, func(b []byte) []byte { b[k+frameHeader+3] ^= 0x40; return b })
				return last, int64(k)
			},
			reason: "the disk lost data it had acknowledged",
		},
		{
			name: "length of a middle record changed",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				offs, _ := frames(t, last)
				k := offs[len(offs)/2]
				rewrite(t, last, func(b []byte) []byte { b[k] += 3; return b })
				return last, int64(k)
			},
			reason: "a valid record follows",
		},
		{
			name: "middle of the last segment zeroed",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				offs, _ := frames(t, last)
				k := offs[1]
				rewrite(t, last, func(b []byte) []byte { clear(b[k : k+30]); return b })
				return last, int64(k)
			},
			reason: "a valid record follows",
		},
		{
			name: "last record of a segment that is not the last",
			damage: func(t *testing.T, segs []string) (string, int64) {
				offs, _ := frames(t, segs[0])
				k := offs[len(offs)-1]
				rewrite(t, segs[0], func(b []byte) []byte { b[len(b)-1] ^= 1; return b })
				return segs[0], int64(k)
			},
			reason: "not the last",
		},
		{
			name: "segment that is not the last cut mid-record",
			damage: func(t *testing.T, segs []string) (string, int64) {
				offs, _ := frames(t, segs[1])
				k := offs[len(offs)-1]
				rewrite(t, segs[1], func(b []byte) []byte { return b[:k+12] })
				return segs[1], int64(k)
			},
			reason: "not the last",
		},
		{
			name: "zeros after the records of a segment that is not the last",
			damage: func(t *testing.T, segs []string) (string, int64) {
				_, end := frames(t, segs[0])
				rewrite(t, segs[0], func(b []byte) []byte { return append(b, make([]byte, 512)...) })
				return segs[0], int64(end)
			},
			reason: "not the last",
		},
		{
			name: "bad magic",
			damage: func(t *testing.T, segs []string) (string, int64) {
				rewrite(t, segs[1], func(b []byte) []byte { b[0] = 'X'; return b })
				return segs[1], 0
			},
			reason: "bad magic",
		},
		{
			name: "bad header of the last segment",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				rewrite(t, last, func(b []byte) []byte { b[15] ^= 1; return b })
				return last, 0
			},
			reason: "header checksum",
		},
		{
			name: "header names another segment",
			damage: func(t *testing.T, segs []string) (string, int64) {
				rewrite(t, segs[1], func(b []byte) []byte { copy(b, appendHeader(nil, 77)); return b })
				return segs[1], 0
			},
			reason: "header names segment 77",
		},
		{
			name: "segment missing",
			damage: func(t *testing.T, segs []string) (string, int64) {
				if err := os.Remove(segs[1]); err != nil {
					t.Fatal(err)
				}
				return segs[2], 0
			},
			reason: "is missing",
		},
		{
			name: "record with a good checksum that does not decode, at the tail",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				_, end := frames(t, last)
				rewrite(t, last, func(b []byte) []byte { return appendFrame(b, RecordCommit, []byte("not a commit record")) })
				return last, int64(end)
			},
			reason: "undecodable commit record",
		},
		{
			name: "abort record with a good checksum that does not decode, at the tail",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				_, end := frames(t, last)
				rewrite(t, last, func(b []byte) []byte { return appendFrame(b, RecordAbort, []byte("\x01\x03abc")) })
				return last, int64(end)
			},
			reason: "undecodable abort record",
		},
		{
			name: "delegation record without a participant, at the tail",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				_, end := frames(t, last)
				rewrite(t, last, func(b []byte) []byte { return appendFrame(b, RecordDelegation, []byte("\x01\x00\x00")) })
				return last, int64(end)
			},
			reason: "undecodable delegation record",
		},
		{
			name: "clear record in the format of version 1 (an XID, no participant), in the middle",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				offs, end := frames(t, last)
				// Insert it before the last record.
				k := offs[len(offs)-1]
				rewrite(t, last, func(b []byte) []byte {
					tail := append([]byte(nil), b[k:end]...)
					b = appendFrame(b[:k], RecordClear, []byte(gid(1).Branch(0).String()))
					return append(b, tail...)
				})
				return last, int64(k)
			},
			reason: "undecodable clear record",
		},
		{
			name: "forget-abort record with a foreign global id",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				_, end := frames(t, last)
				rewrite(t, last, func(b []byte) []byte { return appendFrame(b, RecordForgetAbort, []byte("not ours")) })
				return last, int64(end)
			},
			reason: "undecodable forget-abort record",
		},
		{
			name: "segment of format version 1",
			damage: func(t *testing.T, segs []string) (string, int64) {
				rewrite(t, segs[0], func(b []byte) []byte {
					binary.LittleEndian.PutUint32(b[8:12], 1)
					binary.LittleEndian.PutUint32(b[20:24], crc32.Checksum(b[:20], castagnoli))
					return b
				})
				return segs[0], 0
			},
			reason: "unknown format version 1",
		},
		{
			name: "record of an unknown type with a good checksum, at the tail",
			damage: func(t *testing.T, segs []string) (string, int64) {
				last := segs[len(segs)-1]
				_, end := frames(t, last)
				rewrite(t, last, func(b []byte) []byte { return appendFrame(b, 42, []byte("from the future")) })
				return last, int64(end)
			},
			reason: "unknown record type 42",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			buildLog(t, dir, 40)
			file, off := tt.damage(t, segFiles(t, dir))
			file = filepath.Base(file)
			before := dirHashes(t, dir)

			_, err := Open(dir, Options{})
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
			if ce.File != file || ce.Offset != off || !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("Open: %v; want file %s, offset %d, reason with %q", err, file, off, tt.reason)
			}
			if !strings.Contains(err.Error(), file) {
				t.Errorf("error %q does not name the file", err)
			}
			if after := dirHashes(t, dir); !maps.Equal(before, after) {
				t.Fatalf("Open of a corrupt log modified the directory")
			}

			rep, err := Verify(dir)
			if !errors.Is(err, ErrCorrupt) || len(rep.Corruption) == 0 || rep.Corruption[0].File != file || rep.Corruption[0].Offset != off {
				t.Errorf("Verify: %v, %+v", err, rep.Corruption)
			}
			if err := Dump(dir, func(Entry) error { return nil }); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Dump: %v, want ErrCorrupt", err)
			}
			if after := dirHashes(t, dir); !maps.Equal(before, after) {
				t.Fatalf("Verify or Dump modified the directory")
			}
		})
	}
}

func TestTornTail(t *testing.T) {
	// Each case damages the end of the last segment and says how many of
	// the last segment's records survive.
	tests := []struct {
		name   string
		damage func(b []byte, offs []int) []byte
		lost   int // records of the last segment lost
	}{
		{"cut inside the last record's payload", func(b []byte, offs []int) []byte { return b[:len(b)-7] }, 1},
		{"cut inside the last record's header", func(b []byte, offs []int) []byte { return b[:offs[len(offs)-1]+4] }, 1},
		{"cut after the last record", func(b []byte, offs []int) []byte { return b }, 0},
		{"bad checksum in the last record", func(b []byte, offs []int) []byte { b[len(b)-1] ^= 0x80; return b }, 1},
		{"zeroed tail", func(b []byte, offs []int) []byte { return append(b, make([]byte, 8192)...) }, 0},
		{"zeroed last record", func(b []byte, offs []int) []byte { clear(b[offs[len(offs)-1]:]); return b }, 1},
		{"garbage tail", func(b []byte, offs []int) []byte { return append(b, "\xff\xfe\x01garbage that is no record"...) }, 0},
		{"a partial record after a zeroed stretch", func(b []byte, offs []int) []byte {
			b = append(b, make([]byte, 100)...)
			return append(b, appendFrame(nil, RecordForget, []byte(gid(1).String()))[:20]...)
		}, 0},
		// The kernel wrote a later unsynced page back and not an earlier
		// one: a whole record after the lost one, never acknowledged
		// (no sync mark says the lost bytes were synced).
		{"a record that reached the disk after one that did not", func(b []byte, offs []int) []byte {
			b = append(b, make([]byte, 100)...)
			return appendFrame(b, RecordCommit, mustMarshal(t, commitRec(gid(999), 2)))
		}, 0},
		{"the last record lost, a later one on disk", func(b []byte, offs []int) []byte {
			b = append(b[:offs[len(offs)-1]], make([]byte, len(b)-offs[len(offs)-1])...)
			b = appendFrame(b, RecordSynced, encodeSynced(int64(offs[len(offs)-1])))
			return appendFrame(b, RecordCommit, mustMarshal(t, commitRec(gid(999), 2)))
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			recs := buildLog(t, dir, 40)
			segs := segFiles(t, dir)
			last := segs[len(segs)-1]
			// As a crash would leave it: without the sync mark Close
			// writes, which says that the records before it are sound.
			offs, _ := frames(t, last)
			rewrite(t, last, func(b []byte) []byte {
				if typ, _, _, _ := parseFrame(b, offs[len(offs)-1]); typ != RecordSynced {
					t.Fatalf("the closed log does not end with a sync mark but a %v record", typ)
				}
				return b[:offs[len(offs)-1]]
			})
			offs, end := frames(t, last)
			rewrite(t, last, func(b []byte) []byte { return tt.damage(b, offs) })
			wantEnd := end
			if tt.lost > 0 {
				wantEnd = offs[len(offs)-tt.lost]
			}

			rep, err := Verify(dir)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if st, _ := os.Stat(last); st.Size() != int64(wantEnd) && (rep.TornTail == nil || rep.TornTail.Offset != int64(wantEnd)) {
				t.Errorf("Verify: torn tail %+v, want at offset %d", rep.TornTail, wantEnd)
			}

			l, err := Open(dir, Options{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			got, err := l.Commits(ctx)
			if err != nil {
				t.Fatal(err)
			}
			mustClose(t, l)
			want := recs[:len(recs)-tt.lost]
			if g, w := commitSet(t, got), commitSet(t, want); !equalStrings(g, w) {
				t.Errorf("after Open: %d records, want %d", len(got), len(want))
			}
			// Cut at wantEnd; Close marked what was left as synced,
			// unless a mark after the last record did so already.
			offs, end = frames(t, last)
			b, _ := os.ReadFile(last)
			k := offs[len(offs)-1]
			typ, p, _, _ := parseFrame(b, k)
			upto, _ := decodeSynced(p)
			if end != wantEnd && end != wantEnd+frameHeader+syncedPayload || typ != RecordSynced || upto != int64(k) {
				t.Errorf("last segment is %d bytes after Open, ending in a %v record covering %d; want %d bytes and a sync mark for what precedes it",
					end, typ, upto, wantEnd)
			}
			if rep, err := Verify(dir); err != nil || rep.TornTail != nil {
				t.Errorf("Verify after Open: %v, torn tail %+v", err, rep.TornTail)
			}
		})
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// openCorrupt opens dir, which must be corrupt, and checks that Open,
// ReadSnapshot, Verify and Dump all say so with the same first
// *CorruptError, that it names file and its message mentions each of
// names, and that nothing in dir changed. It returns the error.
func openCorrupt(t *testing.T, dir, file string, names ...string) *CorruptError {
	t.Helper()
	before := dirHashes(t, dir)
	l, err := Open(dir, withClock(Options{NoSync: true}))
	if err == nil {
		got, _ := l.Commits(context.Background())
		mustClose(t, l)
		t.Fatalf("Open succeeded (%d live commit records), want ErrCorrupt", len(got))
	}
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
		t.Fatalf("Open: %v, want ErrCorrupt", err)
	}
	t.Logf("Open: %v", err)
	if ce.File != file {
		t.Errorf("Open: %v; want it to name %s", err, file)
	}
	for _, n := range append(names, file) {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("Open: %v; want it to mention %s", err, n)
		}
	}
	if _, err := ReadSnapshot(dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadSnapshot: %v, want ErrCorrupt", err)
	}
	rep, verr := Verify(dir)
	if c := rep.Corruption; !errors.Is(verr, ErrCorrupt) || len(c) == 0 || c[0].File != ce.File || c[0].Offset != ce.Offset ||
		!strings.HasPrefix(ce.Reason, c[0].Reason) {
		t.Errorf("Verify: %v, %+v; want the error of Open first", verr, rep.Corruption)
	}
	if err := Dump(dir, func(Entry) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Dump: %v, want ErrCorrupt", err)
	}
	if !maps.Equal(before, dirHashes(t, dir)) {
		t.Fatal("Open, ReadSnapshot, Verify or Dump of a corrupt log modified the directory")
	}
	return ce
}

// TestLastSegmentMissing: the newest segment file goes missing (an
// incomplete copy or restore of the log directory, a file lost by the file
// system). The segments left are each sound, and no segment says that
// another follows it: HEAD does.
func TestLastSegmentMissing(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 20)
	segs := segFiles(t, dir)
	if err := os.Remove(segs[len(segs)-1]); err != nil {
		t.Fatal(err)
	}
	openCorrupt(t, dir, headName, filepath.Base(segs[len(segs)-1]), filepath.Base(segs[len(segs)-2]))
}

// TestLastSegmentsMissing: the newest two segments missing.
func TestLastSegmentsMissing(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 20)
	segs := segFiles(t, dir)
	for _, s := range segs[len(segs)-2:] {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	openCorrupt(t, dir, headName, filepath.Base(segs[len(segs)-2]), filepath.Base(segs[len(segs)-1]))
}

// TestOldestSegmentMissing: the oldest segment goes missing although
// compaction never retired it (its live records were never copied
// forward). HEAD says where the log starts.
func TestOldestSegmentMissing(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 20)
	segs := segFiles(t, dir)
	if err := os.Remove(segs[0]); err != nil {
		t.Fatal(err)
	}
	openCorrupt(t, dir, filepath.Base(segs[1]), filepath.Base(segs[0]))
}

// TestMiddleSegmentCutAtRecordBoundary: a segment that is not the last,
// cut exactly at a record boundary (losing its final records, each frame
// left intact): the link record of the next segment says how long it was.
func TestMiddleSegmentCutAtRecordBoundary(t *testing.T) {
	for _, keep := range []string{"all but the last record", "no record", "the link record only"} {
		t.Run(keep, func(t *testing.T) {
			dir := t.TempDir()
			buildLog(t, dir, 20)
			segs := segFiles(t, dir)
			victim := segs[0]
			if keep == "the link record only" {
				victim = segs[1]
			}
			offs, end := frames(t, victim)
			cut := offs[len(offs)-1]
			switch keep {
			case "no record":
				cut = headerSize
			case "the link record only":
				cut = offs[1]
			}
			rewrite(t, victim, func(b []byte) []byte { return b[:cut] })
			next := filepath.Base(segs[slices.Index(segs, victim)+1])
			ce := openCorrupt(t, dir, filepath.Base(victim), next)
			if ce.Offset != int64(cut) || !strings.Contains(ce.Reason, fmt.Sprint(end)) || !strings.Contains(ce.Reason, "cut") {
				t.Errorf("error %v; want offset %d and the length %d the link says", ce, cut, end)
			}
		})
	}
}

// TestSegmentReplacedByLongerOne: a segment longer than the link record
// after it says (another log's file, or an older one put back that went
// on being written): corrupt.
func TestSegmentReplacedByLongerOne(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 20)
	segs := segFiles(t, dir)
	_, end := frames(t, segs[0])
	c, _ := commitRec(gid(999), 1).MarshalBinary()
	rewrite(t, segs[0], func(b []byte) []byte { return appendFrame(b, RecordCommit, c) })
	ce := openCorrupt(t, dir, filepath.Base(segs[0]), filepath.Base(segs[1]))
	if !strings.Contains(ce.Reason, fmt.Sprint(end)) || !strings.Contains(ce.Reason, "more than") {
		t.Errorf("error %v", ce)
	}
}

// TestLinkAndHeadDamage: damage to the link records and HEAD themselves.
func TestLinkAndHeadDamage(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string, segs []string) (file string)
		reason string
	}{
		{
			name: "HEAD missing",
			damage: func(t *testing.T, dir string, segs []string) string {
				if err := os.Remove(filepath.Join(dir, headName)); err != nil {
					t.Fatal(err)
				}
				return headName
			},
			reason: "missing, but",
		},
		{
			name: "HEAD damaged",
			damage: func(t *testing.T, dir string, segs []string) string {
				rewrite(t, filepath.Join(dir, headName), func(b []byte) []byte { b[13] ^= 1; return b })
				return headName
			},
			reason: "HEAD checksum mismatch",
		},
		{
			name: "HEAD empty",
			damage: func(t *testing.T, dir string, segs []string) string {
				rewrite(t, filepath.Join(dir, headName), func(b []byte) []byte { return nil })
				return headName
			},
			reason: "HEAD of 0 bytes",
		},
		{
			name: "link record removed",
			damage: func(t *testing.T, dir string, segs []string) string {
				offs, _ := frames(t, segs[1])
				rewrite(t, segs[1], func(b []byte) []byte { return append(b[:headerSize:headerSize], b[offs[1]:]...) })
				return filepath.Base(segs[1])
			},
			reason: "does not start with a link record",
		},
		{
			name: "link record naming another segment",
			damage: func(t *testing.T, dir string, segs []string) string {
				offs, _ := frames(t, segs[1])
				_, end := frames(t, segs[0])
				rewrite(t, segs[1], func(b []byte) []byte {
					b2 := appendFrame(b[:headerSize:headerSize], RecordLink, encodeLink(Link{Segment: 7, Size: int64(end)}))
					return append(b2, b[offs[1]:]...)
				})
				return filepath.Base(segs[1])
			},
			reason: "names segment 00000000000000000007.wal",
		},
		{
			name: "link record in the middle of a segment",
			damage: func(t *testing.T, dir string, segs []string) string {
				last := segs[len(segs)-1]
				rewrite(t, last, func(b []byte) []byte {
					return appendFrame(b, RecordLink, encodeLink(Link{Segment: 1, Size: 100}))
				})
				return filepath.Base(last)
			},
			reason: "where none belongs",
		},
		{
			name: "link record in segment 1",
			damage: func(t *testing.T, dir string, segs []string) string {
				rewrite(t, segs[0], func(b []byte) []byte {
					b2 := appendFrame(b[:headerSize:headerSize], RecordLink, encodeLink(Link{Segment: 1, Size: 100}))
					return append(b2, b[headerSize:]...)
				})
				return filepath.Base(segs[0])
			},
			reason: "where none belongs",
		},
		{
			name: "segment of version 2 after one of version 4",
			damage: func(t *testing.T, dir string, segs []string) string {
				rewrite(t, segs[1], func(b []byte) []byte { return downgradeSegment(t, b, 2, formatNoLink) })
				return filepath.Base(segs[1])
			},
			reason: "format version 2 (before links) after one of version 4",
		},
		{
			name: "segment of version 3 after one of version 4",
			damage: func(t *testing.T, dir string, segs []string) string {
				rewrite(t, segs[1], func(b []byte) []byte { return downgradeSegment(t, b, 2, formatLinked) })
				return filepath.Base(segs[1])
			},
			reason: "format version 3 (before sync marks) after one of version 4",
		},
		{
			name: "sync mark in a segment of version 3",
			damage: func(t *testing.T, dir string, segs []string) string {
				downgradeLog(t, segs)
				last := segs[len(segs)-1]
				rewrite(t, last, func(b []byte) []byte { return appendFrame(b, RecordSynced, encodeSynced(headerSize+1)) })
				return filepath.Base(last)
			},
			reason: "a sync mark in a segment of format version 3",
		},
		{
			name: "sync mark covering bytes after it",
			damage: func(t *testing.T, dir string, segs []string) string {
				last := segs[len(segs)-1]
				rewrite(t, last, func(b []byte) []byte { return appendFrame(b, RecordSynced, encodeSynced(int64(len(b)+1))) })
				return filepath.Base(last)
			},
			reason: "after it, had been synced",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			buildLog(t, dir, 20)
			file := tt.damage(t, dir, segFiles(t, dir))
			ce := openCorrupt(t, dir, file)
			if !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("error %v; want a reason with %q", ce, tt.reason)
			}
		})
	}
}

// downgradeSegment returns segment n (the content b) as format version
// (formatNoLink or formatLinked) wrote it: the version in the header, no
// sync marks, and for formatNoLink no link record.
func downgradeSegment(t *testing.T, b []byte, n uint64, version uint32) []byte {
	t.Helper()
	out := slices.Clone(b[:headerSize])
	binary.LittleEndian.PutUint32(out[8:12], version)
	binary.LittleEndian.PutUint32(out[20:24], crc32.Checksum(out[:20], castagnoli))
	off := headerSize
	if n > 1 {
		typ, _, end, bad := parseFrame(b, off)
		if bad != "" || typ != RecordLink {
			t.Fatalf("segment %d does not start with a link record", n)
		}
		if version != formatNoLink {
			out = append(out, b[off:end]...)
		}
		off = end
	}
	for off < len(b) {
		typ, _, end, bad := parseFrame(b, off)
		if bad != "" {
			return append(out, b[off:]...)
		}
		if typ != RecordSynced {
			out = append(out, b[off:end]...)
		}
		off = end
	}
	return out
}

// downgradeLog rewrites the segments segs (all of a log, oldest first) as
// format version 3 wrote them: without sync marks, each link record giving
// the length of the segment before it without its marks.
func downgradeLog(t *testing.T, segs []string) {
	t.Helper()
	var prev int
	for i, s := range segs {
		n, _ := parseSegmentName(filepath.Base(s))
		rewrite(t, s, func(b []byte) []byte {
			b = downgradeSegment(t, b, n, formatLinked)
			if i > 0 {
				lk := appendFrame(nil, RecordLink, encodeLink(Link{Segment: n - 1, Size: int64(prev)}))
				copy(b[headerSize:], lk)
			}
			prev = len(b)
			return b
		})
	}
}

// rotateIntoCurrent logs n commit records to l, closes it and checks that
// the log in dir, whose segments were segs, rotated into a segment of the
// current format version; it returns the segments after.
func rotateIntoCurrent(t *testing.T, l *Log, dir string, segs []string, n int) []string {
	t.Helper()
	for i := range n {
		if err := l.LogCommit(context.Background(), commitRec(gid(1000+i), 2)); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, l)
	after := segFiles(t, dir)
	if len(after) <= len(segs) {
		t.Fatalf("no rotation: %d segments before, %d after", len(segs), len(after))
	}
	newest := after[len(after)-1]
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	num, _ := parseSegmentName(filepath.Base(newest))
	if v, bad := parseHeader(b, num); v != formatVersion {
		t.Fatalf("new segment of format version %d (%s)", v, bad)
	}
	return after
}

// TestLogOfVersion3: a log written before sync marks opens with every
// record. Its active segment gets no marks (an older version can still
// read it until it rotates) and keeps the old rule: a damaged record
// followed by a valid one is corruption. The segments Open starts have
// marks.
func TestLogOfVersion3(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	recs := buildLog(t, dir, 20)
	segs := segFiles(t, dir)
	downgradeLog(t, segs)
	if rep, err := Verify(dir); err != nil || rep.SyncMarks != 0 || rep.Records.Link == 0 {
		t.Fatalf("Verify of a version 3 log: %v, %+v", err, rep)
	}
	last := segs[len(segs)-1]
	l := mustOpen(t, dir, Options{NoSync: true, SegmentSize: 1 << 20})
	if err := l.LogCommit(ctx, commitRec(gid(900), 2)); err != nil {
		t.Fatal(err)
	}
	got, err := l.Commits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	if len(got) != len(recs)+1 {
		t.Fatalf("Open of a version 3 log: %d of %d commit records", len(got), len(recs)+1)
	}
	if rep, err := Verify(dir); err != nil || rep.SyncMarks != 0 {
		t.Fatalf("Verify after appending to the version 3 segment: %v, %d sync marks, want none", err, rep.SyncMarks)
	}
	// The old rule in the version 3 segment.
	_, end := frames(t, last)
	rewrite(t, last, func(b []byte) []byte {
		b = append(b, make([]byte, 100)...)
		return appendFrame(b, RecordCommit, mustMarshal(t, commitRec(gid(999), 2)))
	})
	if ce := openCorrupt(t, dir, filepath.Base(last)); !strings.Contains(ce.Reason, "but a valid record follows") {
		t.Errorf("damage followed by a record in a version 3 segment: %v", ce)
	}
	rewrite(t, last, func(b []byte) []byte { return b[:end] })
	// Rotation starts a segment of the current version, with marks.
	l = mustOpen(t, dir, Options{NoSync: true, SegmentSize: 1500})
	rotateIntoCurrent(t, l, dir, segs, 10)
	if rep, err := Verify(dir); err != nil || rep.SyncMarks == 0 {
		t.Fatalf("Verify after rotating: %v, %d sync marks", err, rep.SyncMarks)
	}
}

// TestLogOfVersion2: a log written before links and HEAD (segments of
// format version 2, no HEAD) opens with every record; Open writes HEAD,
// the segments it starts are of version 3, and from then on the checks
// hold.
func TestLogOfVersion2(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	recs := buildLog(t, dir, 20)
	for _, s := range segFiles(t, dir) {
		n, _ := parseSegmentName(filepath.Base(s))
		rewrite(t, s, func(b []byte) []byte { return downgradeSegment(t, b, n, formatNoLink) })
	}
	if err := os.Remove(filepath.Join(dir, headName)); err != nil {
		t.Fatal(err)
	}
	segs := segFiles(t, dir)
	rep, err := Verify(dir)
	if err != nil || rep.Head != nil || rep.Records.Link != 0 {
		t.Fatalf("Verify of a version 2 log: %v, %+v", err, rep)
	}
	before := dirHashes(t, dir)
	if _, err := ReadSnapshot(dir); err != nil {
		t.Fatalf("ReadSnapshot: %v", err)
	}
	if !maps.Equal(before, dirHashes(t, dir)) {
		t.Fatal("Verify or ReadSnapshot modified the log")
	}

	l := mustOpen(t, dir, Options{NoSync: true, SegmentSize: 1500})
	got, err := l.Commits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("Open of a version 2 log: %d of %d commit records", len(got), len(recs))
	}
	b, err := os.ReadFile(filepath.Join(dir, headName))
	if err != nil {
		t.Fatalf("Open wrote no HEAD: %v", err)
	}
	newest, _ := parseSegmentName(filepath.Base(segs[len(segs)-1]))
	if h, bad := parseHead(b); bad != "" || h.Newest != newest || h.First != 1 {
		t.Fatalf("HEAD after Open: %+v %s, want newest %d, first 1", h, bad, newest)
	}
	// Rotate into segments of the current version.
	after := rotateIntoCurrent(t, l, dir, segs, 20)
	if rep, err := Verify(dir); err != nil || rep.Head == nil || rep.Head.Newest != newest+uint64(len(after)-len(segs)) || rep.Records.Link == 0 {
		t.Fatalf("Verify after rotating: %v, %+v", err, rep)
	}
	// The newest segment, of the current version, is watched by HEAD.
	if err := os.Remove(after[len(after)-1]); err != nil {
		t.Fatal(err)
	}
	openCorrupt(t, dir, headName, filepath.Base(after[len(after)-1]))
}

// TestHeadLagging: HEAD naming the segment before the newest (a crash
// between starting a segment and writing HEAD) is sound; Open brings HEAD
// up to date.
func TestHeadLagging(t *testing.T) {
	dir := t.TempDir()
	recs := buildLog(t, dir, 20)
	segs := segFiles(t, dir)
	newest, _ := parseSegmentName(filepath.Base(segs[len(segs)-1]))
	if err := os.WriteFile(filepath.Join(dir, headName), appendHead(nil, Head{Newest: newest - 1, First: 1}), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(dir); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	l := mustOpen(t, dir, Options{NoSync: true})
	got, _ := l.Commits(context.Background())
	mustClose(t, l)
	if len(got) != len(recs) {
		t.Fatalf("%d of %d commit records", len(got), len(recs))
	}
	if rep, err := Verify(dir); err != nil || rep.Head == nil || *rep.Head != (Head{Newest: newest, First: 1}) {
		t.Fatalf("after Open: %v, HEAD %+v, want newest %d", err, rep.Head, newest)
	}
}

// TestCrashBeforeHead stops a rotation after the new segment is durable and
// before HEAD names it (and with it gone too, as if its creation had not
// reached the disk): the log opens with every acknowledged record, and Open
// brings HEAD up to date. A segment HEAD does not name yet holds nothing
// but its link record and copies of records that are still in older
// segments, so losing it loses nothing.
func TestCrashBeforeHead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	root := t.TempDir()
	h := &hookFS{}
	l := mustCreate(t, dir, Options{fs: h, SegmentSize: 1024})
	tr := newTracker()
	var snaps []snapshot
	var hookErr error
	h.setHook(func(op, name string, p []byte, off int64) error {
		if op != "write" || name != headName+".tmp" {
			return nil
		}
		s := tr.snapshot("", fmt.Sprintf("before HEAD is written (#%d)", len(snaps)))
		cp, err := copyDir(root, dir)
		if err != nil {
			hookErr = err
			return nil
		}
		s.dir = cp
		snaps = append(snaps, s)
		return nil
	})
	for i := range 60 {
		if err := tr.commit(ctx, t, l, commitRec(gid(i), 2)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := tr.forget(ctx, l, gid(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.setHook(nil)
	mustClose(t, l)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if len(snaps) < 3 {
		t.Fatalf("only %d rotations", len(snaps))
	}
	for _, s := range snaps {
		segs := segFiles(t, s.dir)
		newest, _ := parseSegmentName(filepath.Base(segs[len(segs)-1]))
		b, err := os.ReadFile(filepath.Join(s.dir, headName))
		if err != nil {
			t.Fatal(err)
		}
		if head, bad := parseHead(b); bad != "" || head.Newest != newest-1 {
			t.Fatalf("%s: HEAD %+v (%s), newest segment %d: not the state under test", s.what, head, bad, newest)
		}
		lost, err := copyDir(root, s.dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(lost, filepath.Base(segs[len(segs)-1]))); err != nil {
			t.Fatal(err)
		}
		tr.check(t, s.dir, s)
		if rep, err := Verify(s.dir); err != nil || rep.Head == nil || rep.Head.Newest != newest {
			t.Fatalf("%s: after Open: %v, HEAD %+v, want newest %d", s.what, err, rep.Head, newest)
		}
		s.what += ", the new segment lost"
		tr.check(t, lost, s)
	}
	t.Logf("%d rotations stopped before HEAD", len(snaps))
}
