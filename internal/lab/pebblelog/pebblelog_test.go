package pebblelog

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/goleak"

	"github.com/xadb/xa/xa"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func gid(i int) xa.GlobalID {
	return xa.GlobalID{Node: "node-1", Begun: time.UnixMilli(1_700_000_000_000 + int64(i)), Rand: uint64(i) + 1}
}

func commitRec(i int) xa.CommitRecord {
	id := gid(i)
	rec := xa.CommitRecord{ID: id, Logged: time.Unix(0, id.Begun.UnixNano()+5)}
	for b := range 2 {
		rec.Branches = append(rec.Branches, xa.BranchRecord{RM: fmt.Sprintf("db-%d", b), XID: id.Branch(b)})
	}
	return rec
}

func TestAPI(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil {
		t.Fatal("second Open of a locked database succeeded")
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 10 {
				if err := l.LogCommit(ctx, commitRec(w*10+i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i := 0; i < 80; i += 2 {
		if err := l.Forget(ctx, gid(i)); err != nil {
			t.Fatal(err)
		}
	}
	if l.SyncCount() == 0 {
		t.Error("no WAL syncs counted")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := l.Commits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 40 {
		t.Fatalf("%d records after reopen, want 40", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Logged.Before(got[i-1].Logged) {
			t.Fatal("Commits not oldest first")
		}
	}
	if r, ok, err := l.Lookup(ctx, gid(3)); err != nil || !ok || r.ID != gid(3) || len(r.Branches) != 2 {
		t.Fatalf("Lookup(3) = %v, %v, %v", r, ok, err)
	}
	if _, ok, err := l.Lookup(ctx, gid(2)); err != nil || ok {
		t.Fatalf("Lookup of a forgotten record: %v, %v", ok, err)
	}
}

// walFile returns the WAL of a closed database in dir that holds record i.
func walFile(t *testing.T, dir string, i int) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, key(gid(i))) {
			return p
		}
	}
	t.Fatalf("no WAL holds record %d (WAL files: %v)", i, m)
	return ""
}

// chunkFormat names the wire format of the first chunk of a WAL file.
func chunkFormat(t *testing.T, wal string) string {
	b, err := os.ReadFile(wal)
	if err != nil || len(b) < 7 {
		t.Fatalf("reading %s: %v", wal, err)
	}
	switch enc := b[6]; {
	case enc >= 9 && enc <= 12:
		return "WAL-sync chunks (with synced offsets)"
	case enc >= 5 && enc <= 8:
		return "recyclable chunks (no synced offsets)"
	default:
		return fmt.Sprintf("chunk encoding %d", enc)
	}
}

// corruptRecord flips one byte of the value of record i in the WAL file,
// so that its chunk's checksum fails, and returns the byte offset.
func corruptRecord(t *testing.T, wal string, i int) int {
	t.Helper()
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	k := bytes.Index(b, key(gid(i)))
	if k < 0 {
		t.Fatalf("record %d not found in the WAL", i)
	}
	off := k + len(key(gid(i))) + 4
	b[off] ^= 0x20
	if err := os.WriteFile(wal, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return off
}

// TestPebbleDropsRecordsAfterCorruptionInLastWAL demonstrates that Pebble
// v2.1.7 can take a damaged record in the middle of the last WAL for the
// end of the log: Open succeeds and every record after the damaged one is
// gone, without an error.
//
// In the source: record.Reader.Next, on a bad chunk, calls
// readAheadForCorruption, which reads the blocks *after* the current 32 KiB
// block and reports corruption only if one of their WAL-sync chunks claims
// a synced offset past the bad chunk; otherwise it returns
// ErrUnexpectedEOF, which replayWAL (open.go) accepts as a clean end of the
// last WAL (strictWALTail=false). WAL-sync chunks are written only once the
// database's format is FormatWALSyncChunks or newer, and the first WAL of a
// new database is created before Open ratchets the format up.
//
// Each case writes 200 records, each synced on its own (every one
// acknowledged), damages one, closes and reopens.
func TestPebbleDropsRecordsAfterCorruptionInLastWAL(t *testing.T) {
	const n = 200
	tests := []struct {
		name     string
		format   pebble.FormatMajorVersion
		reopened bool // write into the WAL of a second Open, after the format ratchet
		pad      int  // bytes of padding per record, to spread the WAL over more blocks
		bad      int  // the damaged record
		lost     bool // whether Pebble drops the records after the bad one
	}{
		{name: "new database, newest format", format: pebble.FormatNewest, bad: 20, lost: true},
		{name: "new database, newest format, large WAL", format: pebble.FormatNewest, pad: 1000, bad: 20, lost: true},
		{name: "default format, reopened, large WAL", format: pebble.FormatMinSupported, reopened: true, pad: 1000, bad: 20, lost: true},
		{name: "newest format, reopened, damage in the last block", format: pebble.FormatNewest, reopened: true, bad: 195, lost: true},
		// For fairness: with WAL-sync chunks in later blocks, Pebble does
		// detect the damage and refuses to open.
		{name: "newest format, reopened, damage in an earlier block", format: pebble.FormatNewest, reopened: true, bad: 20, lost: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := Options{FormatMajorVersion: tt.format}
			l, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			if tt.reopened {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				if l, err = Open(dir, opts); err != nil {
					t.Fatal(err)
				}
			}
			for i := range n {
				rec := commitRec(i)
				rec.Branches[0].RM += string(bytes.Repeat([]byte("x"), tt.pad))
				if err := l.LogCommit(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			wal := walFile(t, dir, tt.bad)
			st, _ := os.Stat(wal)
			format := chunkFormat(t, wal)
			off := corruptRecord(t, wal, tt.bad)
			t.Logf("WAL %s: %d bytes, %s; flipped byte %d (block %d of %d) inside record %d of %d",
				filepath.Base(wal), st.Size(), format, off, off/32768, (st.Size()+32767)/32768, tt.bad, n)

			l, err = Open(dir, opts)
			if !tt.lost {
				if !pebble.IsCorruptionError(err) {
					t.Fatalf("Open: %v, want a Pebble corruption error", err)
				}
				t.Logf("Open refused: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("Open: %v (Pebble detected the damage; the claim no longer holds here)", err)
			}
			got, err := l.Commits(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.bad {
				t.Fatalf("%d records after Open, want %d (all before the damaged one, none after)", len(got), tt.bad)
			}
			t.Logf("Open succeeded without error and returned %d of %d acknowledged records: %d silently dropped",
				len(got), n, n-len(got))

			// The replay flushed what it kept and started a new WAL:
			// the loss is permanent.
			if l, err = Open(dir, opts); err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if got, _ := l.Commits(ctx); len(got) != tt.bad {
				t.Fatalf("second reopen: %d records", len(got))
			}
		})
	}
}
