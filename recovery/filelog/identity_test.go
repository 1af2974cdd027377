package filelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xadb/xa/xa"
)

func TestCreateTwiceIsErrExist(t *testing.T) {
	dir := t.TempDir()
	l := mustCreate(t, dir, Options{NoSync: true})
	mustClose(t, l)
	other := testIdent
	other.ID++
	before := dirHashes(t, dir)
	if _, err := Create(dir, other, Options{NoSync: true}); !errors.Is(err, ErrExist) {
		t.Fatalf("Create over a log: %v, want ErrExist", err)
	}
	if !maps.Equal(before, dirHashes(t, dir)) {
		t.Fatal("a refused Create changed the directory")
	}
	l = mustOpen(t, dir, Options{NoSync: true})
	defer mustClose(t, l)
	if !sameIdentity(l.Identity(), testIdent) {
		t.Fatalf("identity after a refused Create: %+v", l.Identity())
	}
}

// TestCreateRefusesSegmentsWithoutIdentity: a directory with records but no
// IDENTITY (damage, or a log from before identities) is neither adopted by
// Open nor replaced by Create.
func TestCreateRefusesSegmentsWithoutIdentity(t *testing.T) {
	dir := t.TempDir()
	buildLog(t, dir, 40)
	if err := os.Remove(filepath.Join(dir, identityName)); err != nil {
		t.Fatal(err)
	}
	before := dirHashes(t, dir)
	if _, err := Create(dir, testIdent, Options{NoSync: true}); !errors.Is(err, ErrExist) {
		t.Fatalf("Create over segments without IDENTITY: %v, want ErrExist", err)
	}
	_, err := Open(dir, Options{NoSync: true})
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.File != identityName || !strings.Contains(ce.Reason, "not adopted") {
		t.Fatalf("Open of segments without IDENTITY: %v, want ErrCorrupt naming %s", err, identityName)
	}
	if _, err := ReadSnapshot(dir); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadSnapshot: %v, want ErrCorrupt", err)
	}
	rep, err := Verify(dir)
	if !errors.Is(err, ErrCorrupt) || len(rep.Corruption) == 0 || rep.Corruption[0].File != identityName || rep.LiveCommits != 46 {
		t.Fatalf("Verify: %v, %+v", err, rep)
	}
	if !maps.Equal(before, dirHashes(t, dir)) {
		t.Fatal("the directory changed")
	}
}

// TestOpenOfNoLog: Open of a missing, empty or foreign directory fails with
// ErrNoLog, says how to create a log and why the directory matters, and
// creates nothing.
func TestOpenOfNoLog(t *testing.T) {
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("not a log"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{
		"missing": filepath.Join(t.TempDir(), "nope"),
		"empty":   t.TempDir(),
		"foreign": foreign,
	} {
		t.Run(name, func(t *testing.T) {
			var before []fs.DirEntry
			if name != "missing" {
				before, _ = os.ReadDir(dir)
			}
			_, err := Open(dir, Options{})
			if !errors.Is(err, ErrNoLog) {
				t.Fatalf("Open: %v, want ErrNoLog", err)
			}
			if name == "missing" != errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Open: %v; fs.ErrNotExist exactly when the directory is missing", err)
			}
			for _, want := range []string{"xactl log init", "filelog.Create", "wrong directory", "undecided"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if name == "missing" {
				if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("Open created the directory: %v", err)
				}
				return
			}
			if after, _ := os.ReadDir(dir); len(after) != len(before) {
				t.Fatalf("Open changed the directory: %v", after)
			}
		})
	}
}

// TestDamagedIdentity: a damaged IDENTITY is corruption, for Open,
// ReadSnapshot, Verify and Dump alike, and nothing is modified.
func TestDamagedIdentity(t *testing.T) {
	damages := map[string]func([]byte) []byte{
		"byte flipped in the identity": func(b []byte) []byte { b[20] ^= 1; return b },
		"checksum flipped":             func(b []byte) []byte { b[len(b)-1] ^= 0x10; return b },
		"bad magic":                    func(b []byte) []byte { b[0] = 'X'; return b },
		"truncated":                    func(b []byte) []byte { return b[:len(b)-3] },
		"trailing bytes":               func(b []byte) []byte { return append(b, 0) },
		"empty":                        func(b []byte) []byte { return nil },
		"identity that does not validate": func([]byte) []byte {
			// A grace no longer than the timeout, encoded by hand:
			// MarshalBinary refuses it.
			raw := []byte{1}
			raw = binary.BigEndian.AppendUint64(raw, uint64(testIdent.ID))
			raw = binary.AppendUvarint(raw, uint64(len(testIdent.Node)))
			raw = append(raw, testIdent.Node...)
			raw = binary.AppendVarint(raw, testIdent.Created.UnixNano())
			raw = binary.AppendVarint(raw, int64(testIdent.Timeout))
			raw = binary.AppendVarint(raw, int64(testIdent.Timeout))
			return appendIdentity(nil, raw)
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			buildLog(t, dir, 40)
			rewrite(t, filepath.Join(dir, identityName), damage)
			before := dirHashes(t, dir)
			_, err := Open(dir, Options{})
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.File != identityName {
				t.Fatalf("Open: %v, want ErrCorrupt naming %s", err, identityName)
			}
			if _, err := ReadSnapshot(dir); !errors.Is(err, ErrCorrupt) {
				t.Errorf("ReadSnapshot: %v", err)
			}
			rep, err := Verify(dir)
			if !errors.Is(err, ErrCorrupt) || len(rep.Corruption) != 1 || rep.Corruption[0].File != identityName || rep.Identity.ID != 0 {
				t.Errorf("Verify: %v, %+v", err, rep)
			}
			n := 0
			if err := Dump(dir, func(e Entry) error {
				if e.Type == RecordIdentity {
					t.Errorf("Dump shows a damaged identity: %+v", e)
				}
				if e.Type == RecordCommit {
					n++
				}
				return nil
			}); !errors.Is(err, ErrCorrupt) || n != 46 {
				t.Errorf("Dump: %v after %d commit records, want ErrCorrupt after 46", err, n)
			}
			if !maps.Equal(before, dirHashes(t, dir)) {
				t.Fatal("the directory changed")
			}
		})
	}
}

func TestIdentityWithoutSegments(t *testing.T) {
	dir := t.TempDir()
	mustClose(t, mustCreate(t, dir, Options{NoSync: true}))
	if err := os.Remove(filepath.Join(dir, segmentName(1))); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "no segment") {
		t.Fatalf("Open of an identity without segments: %v, want ErrCorrupt", err)
	}
	if _, err := Create(dir, testIdent, Options{}); !errors.Is(err, ErrExist) {
		t.Fatalf("Create: %v, want ErrExist", err)
	}
}

// TestCreateCrash stops Create before each of its file operations (and
// with what was not synced lost): the directory then either holds no log
// (Open fails with ErrNoLog or ErrCorrupt, and Create succeeds) or the
// complete log with its identity.
func TestCreateCrash(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "log")
	h := &hookFS{}
	var snaps []string
	var hookErr error
	h.setHook(func(op, name string, p []byte, off int64) error {
		for _, lose := range []bool{false, true} {
			cp, err := copyDir(root, dir)
			if err != nil {
				hookErr = err
				return nil
			}
			if lose {
				des, _ := os.ReadDir(cp)
				for _, de := range des {
					from, to := h.unsynced(filepath.Join(dir, de.Name()))
					if to > from {
						if err := zeroRange(filepath.Join(cp, de.Name()), from, to); err != nil {
							hookErr = err
						}
					}
				}
			}
			snaps = append(snaps, fmt.Sprintf("%s\x00before %s %s (unsynced lost: %v)", cp, op, name, lose))
		}
		return nil
	})
	l := mustCreate(t, dir, Options{fs: h})
	h.setHook(nil)
	mustClose(t, l)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if len(snaps) < 8 {
		t.Fatalf("only %d crash points", len(snaps))
	}
	created := 0
	for _, s := range snaps {
		cp, what, _ := strings.Cut(s, "\x00")
		l, err := Open(cp, Options{NoSync: true})
		if err == nil {
			if !sameIdentity(l.Identity(), testIdent) {
				t.Errorf("%s: identity %+v", what, l.Identity())
			}
			mustClose(t, l)
			created++
			continue
		}
		if !errors.Is(err, ErrNoLog) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Open: %v", what, err)
		}
		// Not a log yet: Create finishes the job.
		other := testIdent
		other.ID = 77
		openErr := err
		l, err = Create(cp, other, Options{NoSync: true})
		if err != nil {
			t.Fatalf("%s: Open said %v, and Create failed: %v", what, openErr, err)
		}
		mustClose(t, l)
		if l, err = Open(cp, Options{NoSync: true}); err != nil || l.Identity().ID != 77 {
			t.Fatalf("%s: Open after Create: %v", what, err)
		}
		mustClose(t, l)
	}
	t.Logf("%d crash points, %d of them after the log existed", len(snaps), created)
}

// TestLogIdentityRoundTrip: the identity file round trip, and that
// Identity() is the same before and after a reopen.
func TestLogIdentityRoundTrip(t *testing.T) {
	raw, err := testIdent.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, bad := parseIdentity(appendIdentity(nil, raw))
	if bad != "" || !sameIdentity(got, testIdent) {
		t.Fatalf("parseIdentity = %+v, %q", got, bad)
	}
	ident, err := xa.NewLogIdentity("n1", 0, 0, testStart)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l, err := Create(dir, ident, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	first := l.Identity()
	mustClose(t, l)
	l = mustOpen(t, dir, Options{NoSync: true})
	defer mustClose(t, l)
	if l.Identity() != first || !sameIdentity(first, ident) {
		t.Fatalf("Identity: created %+v, after reopen %+v, want %+v", first, l.Identity(), ident)
	}
	if _, err := Create(t.TempDir(), xa.LogIdentity{}, Options{}); err == nil {
		t.Fatal("Create with an invalid identity succeeded")
	}
}
