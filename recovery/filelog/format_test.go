package filelog

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/xadb/xa/xa"
)

func TestSegmentNames(t *testing.T) {
	tests := []struct {
		name string
		n    uint64
		ok   bool
	}{
		{"00000000000000000001.wal", 1, true},
		{"18446744073709551615.wal", 1<<64 - 1, true},
		{"0000000000000000001.wal", 0, false},   // 19 digits
		{"000000000000000000001.wal", 0, false}, // 21 digits
		{"0000000000000000000a.wal", 0, false},
		{"00000000000000000001.wal.tmp", 0, false},
		{"00000000000000000001.log", 0, false},
		{"LOCK", 0, false},
	}
	for _, tt := range tests {
		n, ok := parseSegmentName(tt.name)
		if n != tt.n || ok != tt.ok {
			t.Errorf("parseSegmentName(%q) = %d, %v; want %d, %v", tt.name, n, ok, tt.n, tt.ok)
		}
		if ok && segmentName(n) != tt.name {
			t.Errorf("segmentName(%d) = %q", n, segmentName(n))
		}
	}
}

func TestHeader(t *testing.T) {
	good := appendHeader(nil, 7)
	if len(good) != headerSize {
		t.Fatalf("header is %d bytes", len(good))
	}
	tests := []struct {
		name   string
		b      []byte
		n      uint64
		reason string
	}{
		{"good", good, 7, ""},
		{"short", good[:10], 7, "short segment header"},
		{"other number", good, 8, "header names segment 7"},
		{"bad magic", append([]byte("XA-DLOG\n"), good[8:]...), 7, "bad magic"},
		{"bad checksum", flip(good, 13), 7, "header checksum"},
	}
	for _, tt := range tests {
		if got := checkHeader(tt.b, tt.n); !strings.Contains(got, tt.reason) || (tt.reason == "") != (got == "") {
			t.Errorf("%s: checkHeader = %q, want %q", tt.name, got, tt.reason)
		}
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 1
	return c
}

func TestFrames(t *testing.T) {
	frame := appendFrame(nil, RecordForget, []byte("xa1.n.0123456789ab0123456789abcdef"))
	tests := []struct {
		name   string
		b      []byte
		reason string
	}{
		{"good", frame, ""},
		{"short header", frame[:5], "incomplete record header"},
		{"short payload", frame[:len(frame)-1], "incomplete record"},
		{"bad checksum", flip(frame, len(frame)-1), "checksum mismatch"},
		{"type not covered", flip(frame, 8), "checksum mismatch"},
		{"huge length", append([]byte{0xff, 0xff, 0xff, 0x7f}, frame[4:]...), "out of range"},
		{"zeros", make([]byte, 40), reasonZeroTail},
		{"few zeros", make([]byte, 3), reasonZeroTail},
	}
	for _, tt := range tests {
		typ, payload, end, bad := parseFrame(tt.b, 0)
		if !strings.Contains(bad, tt.reason) || (tt.reason == "") != (bad == "") {
			t.Errorf("%s: reason %q, want %q", tt.name, bad, tt.reason)
		}
		if bad == "" && (typ != RecordForget || end != len(frame) || string(payload) != string(frame[frameHeader:])) {
			t.Errorf("%s: got %v %q %d", tt.name, typ, payload, end)
		}
		if plausibleFrame(tt.b, 0) != (bad == "") {
			t.Errorf("%s: plausibleFrame disagrees with parseFrame", tt.name)
		}
	}
}

// TestFrameString: appendFrameString frames text exactly as appendFrame
// frames the same bytes, after whatever the buffer holds.
func TestFrameString(t *testing.T) {
	for _, k := range []string{"", "x", "xa1.n.0123456789ab0123456789abcdef"} {
		for _, typ := range []RecordType{RecordForget, RecordForgetAbort} {
			prefix := []byte("earlier frames")
			got := appendFrameString(slices.Clone(prefix), typ, k)
			want := appendFrame(slices.Clone(prefix), typ, []byte(k))
			if !bytes.Equal(got, want) {
				t.Errorf("%v %q: %x, want %x", typ, k, got, want)
			}
		}
	}
}

// TestDecodedKeys: the map keys taken from payloads are the canonical texts
// that Lookup and Forget compute.
func TestDecodedKeys(t *testing.T) {
	for i := range 50 {
		rec := commitRec(gid(i*7919), i%4)
		rec.ID.Node = strings.Repeat("n", 1+i%31)
		p, err := rec.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		d, err := decodePayload(RecordCommit, p)
		if err != nil {
			t.Fatal(err)
		}
		if d.key != rec.ID.String() {
			t.Fatalf("commit key %q, want %q", d.key, rec.ID.String())
		}
		h := heurRec(i, xa.OutcomeCommit)
		p, _ = h.MarshalBinary()
		if d, _ := decodePayload(RecordHeuristic, p); d.hkey != (hkey{h.RM, h.XID.String()}) {
			t.Fatalf("heuristic key %q, want %q", d.hkey, h.XID.String())
		}
		p, _ = encodeClear(h.RM, h.XID)
		if d, _ := decodePayload(RecordClear, p); d.hkey != (hkey{h.RM, h.XID.String()}) {
			t.Fatalf("clear key %q, want %q", d.hkey, h.XID.String())
		}
		a := abortRec(i)
		p, _ = a.MarshalBinary()
		if d, _ := decodePayload(RecordAbort, p); d.key != a.ID.String() {
			t.Fatalf("abort key %q, want %q", d.key, a.ID.String())
		}
		if d, _ := decodePayload(RecordForgetAbort, []byte(a.ID.String())); d.key != a.ID.String() {
			t.Fatalf("forget-abort key %q, want %q", d.key, a.ID.String())
		}
		p, _ = encodeDelegation(xa.Delegation{Participant: h.RM, Logged: testStart})
		if d, _ := decodePayload(RecordDelegation, p); d.key != h.RM || !d.delegation.Logged.Equal(testStart) {
			t.Fatalf("delegation key %q %v, want %q", d.key, d.delegation.Logged, h.RM)
		}
	}
}
