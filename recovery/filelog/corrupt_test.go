package filelog

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			recs := buildLog(t, dir, 40)
			segs := segFiles(t, dir)
			last := segs[len(segs)-1]
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
			if st, err := os.Stat(last); err != nil || st.Size() != int64(wantEnd) {
				t.Errorf("last segment is %d bytes after Open, want %d", st.Size(), wantEnd)
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
