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

// seedPayloads returns a valid payload of each record type.
func seedPayloads() map[RecordType][]byte {
	c, _ := commitRec(gid(1), 2).MarshalBinary()
	h, _ := heurRec(2, xa.OutcomeRollback).MarshalBinary()
	cl, _ := encodeClear("db-0", gid(2).Branch(0))
	a, _ := abortRec(4).MarshalBinary()
	dg, _ := encodeDelegation(xa.Delegation{Participant: "maria", Logged: testStart})
	return map[RecordType][]byte{
		RecordCommit: c, RecordForget: []byte(gid(1).String()), RecordHeuristic: h, RecordClear: cl,
		RecordAbort: a, RecordForgetAbort: []byte(gid(4).String()), RecordDelegation: dg,
	}
}

// seedSegment returns a valid segment 1 holding records of each type.
func seedSegment(tb testing.TB) []byte {
	p := seedPayloads()
	b := appendHeader(nil, 1)
	for _, t := range []RecordType{RecordCommit, RecordHeuristic, RecordAbort, RecordForget, RecordClear, RecordDelegation, RecordForgetAbort} {
		b = appendFrame(b, t, p[t])
	}
	a, _ := abortRec(5).MarshalBinary()
	b = appendFrame(b, RecordAbort, a)
	c, _ := commitRec(gid(3), 1).MarshalBinary()
	return appendFrame(b, RecordCommit, c)
}

// writeIdentityFile writes testIdent's IDENTITY into dir.
func writeIdentityFile(t testing.TB, dir string) {
	t.Helper()
	raw, err := testIdent.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, identityName), appendIdentity(nil, raw), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzReplay: any bytes as the segment file of a log with a sound
// identity and HEAD. Nothing panics; Open either succeeds or fails with ErrCorrupt
// (and then changes nothing), agreeing with Verify and ReadSnapshot; a log
// Open accepted reopens to the same state, which ReadSnapshot and Dump's
// Live flags show too.
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
		writeIdentityFile(t, dir)
		if err := os.WriteFile(filepath.Join(dir, headName), appendHead(nil, Head{Newest: 1, First: 1}), 0o644); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, segmentName(1))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		nDump := 0
		if err := Dump(dir, func(e Entry) error {
			if e.Type != RecordIdentity {
				nDump++
			}
			return nil
		}); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Dump: %v", err)
		}
		rep, verr := Verify(dir)
		if verr != nil && !errors.Is(verr, ErrCorrupt) {
			t.Fatalf("Verify: %v", verr)
		}
		if n := rep.Records.Total(); n != nDump {
			t.Fatalf("Verify counts %d records, Dump shows %d", n, nDump)
		}
		before := dirHashes(t, dir)
		snap, serr := ReadSnapshot(dir)
		if (serr == nil) != (verr == nil) || serr != nil && !errors.Is(serr, ErrCorrupt) {
			t.Fatalf("ReadSnapshot: %v; Verify: %v", serr, verr)
		}
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
		v1 := viewOf(t, l)
		if v := viewOf(t, snap); !v.equal(v1) {
			t.Fatalf("ReadSnapshot: %v; Open: %v", v, v1)
		}
		mustClose(t, l)
		if rep, err := Verify(dir); err != nil || rep.TornTail != nil {
			t.Fatalf("after Open: Verify %v, torn tail %+v", err, rep.TornTail)
		}
		l = mustOpen(t, dir, Options{NoSync: true})
		defer mustClose(t, l)
		c2, _ := l.Commits(ctx)
		h2, _ := l.Heuristics(ctx)
		if !slices.Equal(commitSet(t, c1), commitSet(t, c2)) || !slices.Equal(heurSet(t, h1), heurSet(t, h2)) || !viewOf(t, l).equal(v1) {
			t.Fatal("reopening changed the live set")
		}
		if v := dumpView(t, dir); !v.equal(v1) {
			t.Fatalf("Dump's live records: %v; Open: %v", v, v1)
		}
	})
}

// FuzzPayload: any bytes as the payload of any record type. Decoding never
// panics; what decodes encodes again to a payload that decodes to the same
// record under the same key, the key the log's methods compute.
func FuzzPayload(f *testing.F) {
	for t, p := range seedPayloads() {
		f.Add(byte(t), p)
		f.Add(byte(t), p[:len(p)/2])
	}
	f.Add(byte(RecordLink), encodeLink(Link{Segment: 3, Size: 4096}))
	f.Add(byte(RecordSynced), encodeSynced(headerSize+100))
	f.Add(byte(RecordClear), []byte("\x00\x00:x:y"))
	f.Add(byte(RecordDelegation), []byte("\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, typ byte, p []byte) {
		rt := RecordType(typ)
		d, err := decodePayload(rt, p)
		if err != nil {
			return
		}
		var again []byte
		switch rt {
		case RecordCommit:
			again, err = d.commit.MarshalBinary()
			if d.key != d.commit.ID.String() {
				t.Fatalf("commit key %q, id %v", d.key, d.commit.ID)
			}
		case RecordForget, RecordForgetAbort:
			again = []byte(d.id.String())
			if d.key != d.id.String() {
				t.Fatalf("%v key %q, id %v", rt, d.key, d.id)
			}
		case RecordHeuristic:
			again, err = d.heuristic.MarshalBinary()
		case RecordClear:
			again, err = encodeClear(d.rm, d.xid)
		case RecordAbort:
			again, err = d.abort.MarshalBinary()
			if d.key != d.abort.ID.String() {
				t.Fatalf("abort key %q, id %v", d.key, d.abort.ID)
			}
		case RecordDelegation:
			again, err = encodeDelegation(d.delegation)
			if d.key != d.delegation.Participant {
				t.Fatalf("delegation key %q, participant %q", d.key, d.delegation.Participant)
			}
		case RecordParticipant:
			again, err = d.part.MarshalBinary()
			if d.key != d.part.Name {
				t.Fatalf("participant key %q, name %q", d.key, d.part.Name)
			}
		case RecordLink:
			again = encodeLink(d.link)
		case RecordSynced:
			again = encodeSynced(d.synced)
		default:
			t.Fatalf("record type %d decoded", typ)
		}
		if err != nil {
			t.Fatalf("%v decoded from %q does not encode: %v", rt, p, err)
		}
		if rt == RecordHeuristic || rt == RecordClear {
			if d.hkey != (hkey{d.rm, d.xid.String()}) {
				t.Fatalf("%v key %v, want participant %q and XID %v", rt, d.hkey, d.rm, d.xid)
			}
		}
		d2, err := decodePayload(rt, again)
		if err != nil {
			t.Fatalf("%v: re-encoded payload does not decode: %v", rt, err)
		}
		if d2.key != d.key || d2.hkey != d.hkey || d2.id.String() != d.id.String() ||
			d2.delegation.Participant != d.delegation.Participant || !d2.delegation.Logged.Equal(d.delegation.Logged) ||
			d2.abort.ID.String() != d.abort.ID.String() || !d2.abort.Logged.Equal(d.abort.Logged) || d2.abort.Reason != d.abort.Reason ||
			d2.link != d.link || d2.synced != d.synced {
			t.Fatalf("%v: round trip changed the record: %+v -> %+v", rt, d, d2)
		}
	})
}

// FuzzIdentity: any bytes as IDENTITY. Parsing never panics; what parses is
// a valid identity that frames and parses again to itself.
func FuzzIdentity(f *testing.F) {
	raw, _ := testIdent.MarshalBinary()
	good := appendIdentity(nil, raw)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte(identityMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		li, bad := parseIdentity(b)
		if bad != "" {
			return
		}
		if err := li.Validate(); err != nil {
			t.Fatalf("parsed an invalid identity: %v", err)
		}
		raw, err := li.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if li2, bad := parseIdentity(appendIdentity(nil, raw)); bad != "" || li2 != li {
			t.Fatalf("round trip: %+v -> %+v (%s)", li, li2, bad)
		}
	})
}
