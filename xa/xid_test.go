package xa

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestXIDText(t *testing.T) {
	for _, tc := range []struct {
		x    XID
		text string
	}{
		{XID{FormatID: 1, Gtrid: []byte("abc"), Bqual: []byte("0")}, "1:abc:0"},
		{XID{FormatID: 0, Gtrid: []byte("a.b-C"), Bqual: nil}, "0:a.b-C:~"},
		{XID{FormatID: 7, Gtrid: []byte{0, 0xff, '\''}, Bqual: []byte("x")}, "7:~AP8n:x"},
		{XID{FormatID: 2147483647, Gtrid: []byte("g:h"), Bqual: []byte("_")}, "2147483647:~Zzpo:~Xw"},
	} {
		if got := tc.x.String(); got != tc.text {
			t.Errorf("%#v.String() = %q, want %q", tc.x, got, tc.text)
		}
		back, err := ParseXID(tc.text)
		if err != nil || !back.Equal(tc.x) {
			t.Errorf("ParseXID(%q) = %#v, %v", tc.text, back, err)
		}
	}
}

func TestParseXIDRejects(t *testing.T) {
	for _, s := range []string{
		"", "1", "1:a", "01:a:b", "+1:a:b", "-1:a:b", "x:a:b", "4294967296:a:b",
		"1::b",                                // empty gtrid
		"1:~YWJj:b",                           // "abc" encoded although plain: not canonical
		"1:a b:c",                             // space is not plain
		"1:~!!:b",                             // bad base64
		"1:a:b:c",                             // extra colon
		"1:" + strings.Repeat("g", 65) + ":b", // 65-byte gtrid
		strings.Repeat("9", 200),
	} {
		if _, err := ParseXID(s); !errors.Is(err, ErrInvalidXID) {
			t.Errorf("ParseXID(%q) = %v, want ErrInvalidXID", s, err)
		}
	}
}

func TestValidateLimits(t *testing.T) {
	ok := XID{FormatID: 1, Gtrid: bytes.Repeat([]byte{0xff}, 64), Bqual: bytes.Repeat([]byte{0}, 64)}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := len(ok.String()); n > MaxTextLen {
		t.Fatalf("text of a maximal XID is %d bytes, over PostgreSQL's limit", n)
	}
	for _, bad := range []XID{
		{FormatID: 1, Gtrid: bytes.Repeat([]byte("g"), 65)},
		{FormatID: 1, Gtrid: []byte("g"), Bqual: bytes.Repeat([]byte("q"), 65)},
		{FormatID: -1, Gtrid: []byte("g")},
		{FormatID: 1},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidXID) {
			t.Errorf("Validate(%#v) = %v", bad, err)
		}
	}
}

func TestGlobalID(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_123)
	g, err := NewGlobalID("node-A_1", now)
	if err != nil {
		t.Fatal(err)
	}
	s := g.String()
	if !strings.HasPrefix(s, "xa1.node-A_1.") || len(s) != len("xa1.node-A_1.")+28 {
		t.Fatalf("gtrid %q", s)
	}
	back, ok := ParseGlobalIDString(s)
	if !ok || back != g || !back.Begun.Equal(now) {
		t.Fatalf("ParseGlobalID(%q) = %+v, %v", s, back, ok)
	}
	long, err := NewGlobalID(strings.Repeat("n", 31), now)
	if err != nil || len(long.Gtrid()) != MaxGtridLen {
		t.Fatalf("longest node: %v, gtrid of %d bytes", err, len(long.Gtrid()))
	}
	for _, node := range []string{"", strings.Repeat("n", 32), "a.b", "a b", "é"} {
		if _, err := NewGlobalID(node, now); !errors.Is(err, ErrInvalidNode) {
			t.Errorf("node %q accepted: %v", node, err)
		}
	}
	x := g.Branch(12)
	og, i, ok := Owned(x)
	if !ok || og != g || i != 12 {
		t.Fatalf("Owned(%s) = %+v, %d, %v", x, og, i, ok)
	}
}

func TestOwnedRefusesForeign(t *testing.T) {
	g, _ := NewGlobalID("n1", time.Now())
	ours := g.Branch(0)
	for name, x := range map[string]XID{
		"other formatID":  {FormatID: 1, Gtrid: ours.Gtrid, Bqual: ours.Bqual},
		"other prefix":    {FormatID: FormatID, Gtrid: []byte("xa2" + string(ours.Gtrid[3:])), Bqual: ours.Bqual},
		"short id":        {FormatID: FormatID, Gtrid: ours.Gtrid[:len(ours.Gtrid)-1], Bqual: ours.Bqual},
		"upper-case hex":  {FormatID: FormatID, Gtrid: bytes.ToUpper(ours.Gtrid), Bqual: ours.Bqual},
		"bad node":        {FormatID: FormatID, Gtrid: []byte("xa1.a b.0123456789ab0123456789abcdef"), Bqual: ours.Bqual},
		"empty bqual":     {FormatID: FormatID, Gtrid: ours.Gtrid},
		"bqual not digit": {FormatID: FormatID, Gtrid: ours.Gtrid, Bqual: []byte("x")},
		"bqual leading 0": {FormatID: FormatID, Gtrid: ours.Gtrid, Bqual: []byte("01")},
		"bqual too big":   {FormatID: FormatID, Gtrid: ours.Gtrid, Bqual: []byte("10000")},
		"binary":          {FormatID: FormatID, Gtrid: []byte{0, 0xff, '\''}, Bqual: []byte{0}},
	} {
		if _, _, ok := Owned(x); ok {
			t.Errorf("%s: %s taken for ours", name, x)
		}
	}
}

// FuzzParseXID: any text either fails to parse or is canonical.
func FuzzParseXID(f *testing.F) {
	for _, s := range []string{"1:abc:0", "0:a:~", "7:~AP8n:x", "2019622913:xa1.n.0193a4b5c6d70123456789abcdef:1", "1:~YWJj:b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		x, err := ParseXID(s)
		if err != nil {
			return
		}
		if x.String() != s {
			t.Fatalf("ParseXID(%q).String() = %q", s, x.String())
		}
		if x.Validate() != nil {
			t.Fatalf("ParseXID(%q) returned an invalid XID", s)
		}
	})
}

// FuzzXIDRoundTrip: every valid XID survives its text form, within
// PostgreSQL's gid limit; Owned never panics and, when it says ours, the
// XID is exactly the branch it names.
func FuzzXIDRoundTrip(f *testing.F) {
	f.Add(int32(1), []byte("abc"), []byte("0"))
	f.Add(FormatID, []byte("xa1.n.0193a4b5c6d70123456789abcdef"), []byte("3"))
	f.Add(int32(0), []byte{0, 0xff, '\'', '\\'}, []byte{})
	f.Fuzz(func(t *testing.T, fid int32, gtrid, bqual []byte) {
		x := XID{FormatID: fid, Gtrid: gtrid, Bqual: bqual}
		if g, i, ok := Owned(x); ok && !g.Branch(i).Equal(x) {
			t.Fatalf("Owned(%s) = %v, %d but that branch is %s", x, g, i, g.Branch(i))
		}
		if x.Validate() != nil {
			return
		}
		s := x.String()
		if len(s) > MaxTextLen {
			t.Fatalf("%d-byte text for a valid XID", len(s))
		}
		back, err := ParseXID(s)
		if err != nil || !back.Equal(x) {
			t.Fatalf("ParseXID(%q) = %v, %v; want %#v", s, back, err, x)
		}
	})
}

func TestCommitRecordRoundTrip(t *testing.T) {
	g, _ := NewGlobalID("n1", time.Now())
	rec := CommitRecord{ID: g, Logged: time.Unix(0, 1_700_000_000_123_456_789), Branches: []BranchRecord{
		{RM: "maria", XID: g.Branch(0), Origin: Origin{Session: 42, Prepared: time.Unix(0, 1_700_000_000_000_000_001)}},
		{RM: "pg", XID: g.Branch(1)},
	}}
	b, err := rec.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back CommitRecord
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if back.ID != rec.ID || !back.Logged.Equal(rec.Logged) || len(back.Branches) != 2 ||
		back.Branches[0].RM != "maria" || !back.Branches[0].XID.Equal(g.Branch(0)) || back.Branches[0].Origin.Session != 42 ||
		!back.Branches[0].Origin.Prepared.Equal(rec.Branches[0].Origin.Prepared) || !back.Branches[1].Origin.Prepared.IsZero() {
		t.Fatalf("round trip: %+v", back)
	}
	for i := range b {
		if err := new(CommitRecord).UnmarshalBinary(b[:i]); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
	}
	bad := rec
	bad.Branches = []BranchRecord{{RM: strings.Repeat("r", maxRMName+1), XID: g.Branch(0)}}
	if _, err := bad.MarshalBinary(); err == nil {
		t.Fatal("a record UnmarshalBinary would refuse was encoded")
	}
}

func TestHeuristicRecordRoundTrip(t *testing.T) {
	h := HeuristicRecord{RM: "pg", XID: XID{FormatID: 1, Gtrid: []byte{0, 1}, Bqual: nil}, Action: OutcomeRollback, Forced: true, Time: time.Unix(5, 6), Reason: "3 a.m."}
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back HeuristicRecord
	if err := back.UnmarshalBinary(b); err != nil || back.RM != h.RM || !back.XID.Equal(h.XID) || back.Action != h.Action || !back.Forced || !back.Time.Equal(h.Time) || back.Reason != h.Reason {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

// FuzzUnmarshalRecords: arbitrary bytes never panic the decoders, and
// whatever decodes encodes again.
func FuzzUnmarshalRecords(f *testing.F) {
	g, _ := NewGlobalID("n1", time.Unix(1, 0))
	b, _ := CommitRecord{ID: g, Logged: time.Unix(2, 0), Branches: []BranchRecord{{RM: "a", XID: g.Branch(0)}}}.MarshalBinary()
	f.Add(b)
	h, _ := HeuristicRecord{RM: "a", XID: g.Branch(0), Action: OutcomeCommit, Time: time.Unix(3, 0)}.MarshalBinary()
	f.Add(h)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r CommitRecord
		if r.UnmarshalBinary(b) == nil {
			if _, err := r.MarshalBinary(); err != nil {
				t.Fatalf("decoded commit record does not encode: %v", err)
			}
		}
		var h HeuristicRecord
		if h.UnmarshalBinary(b) == nil {
			if _, err := h.MarshalBinary(); err != nil {
				t.Fatalf("decoded heuristic record does not encode: %v", err)
			}
		}
	})
}
