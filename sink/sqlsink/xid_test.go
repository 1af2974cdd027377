package sqlsink

import (
	"strings"
	"testing"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/xa"
)

func TestXIDEncode(t *testing.T) {
	r := Ref{Sink: "orders", Incarnation: 7, Checkpoint: 0x1234, Target: "pg-main"}
	x := r.XID()
	if x.FormatID != 0x78730001 || string(x.Gtrid) != "xs1.orders.0000000000000007.000000001234" || string(x.Bqual) != "pg-main" {
		t.Fatalf("XID: %d %s %s", x.FormatID, x.Gtrid, x.Bqual)
	}
	if got := x.String(); got != "2020802561:xs1.orders.0000000000000007.000000001234:pg-main" {
		t.Fatalf("text: %s", got)
	}
	long := Ref{Sink: strings.Repeat("s", 24), Incarnation: 1<<63 - 1, Checkpoint: sink.MaxCheckpoint, Target: strings.Repeat("t", 64)}
	if err := long.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := len(long.Gtrid()); n != 58 {
		t.Fatalf("the longest gtrid is %d bytes, want 58", n)
	}
	if err := long.XID().Validate(); err != nil {
		t.Fatal(err)
	}
	e := Ref{Sink: "s", Incarnation: ExternalIncarnation(3, 9), Checkpoint: 4, Target: "t"}
	if !e.External() || e.Member() != 3 || e.Generation() != 9 || e.String() != "s/m3.g9/4@t" {
		t.Fatalf("external ref: %v %d %d %s", e.External(), e.Member(), e.Generation(), e)
	}
	if r.External() || r.Member() != 0 || r.String() != "orders/7/4660@pg-main" {
		t.Fatalf("self-driven ref: %s", r)
	}
}

func TestParseXID(t *testing.T) {
	good := Ref{Sink: "a_b-C9", Incarnation: 1, Checkpoint: 2, Target: "my.db-1"}
	x := good.XID()
	if r, ok := ParseXID(x); !ok || r != good {
		t.Fatalf("ParseXID(%s) = %+v, %v", x, r, ok)
	}
	for _, tc := range []struct {
		name string
		x    xa.XID
	}{
		{"tm's format", xa.XID{FormatID: xa.FormatID, Gtrid: x.Gtrid, Bqual: x.Bqual}},
		{"other prefix", xa.XID{FormatID: FormatID, Gtrid: []byte("xs2.a.0000000000000001.000000000002"), Bqual: x.Bqual}},
		{"upper hex", xa.XID{FormatID: FormatID, Gtrid: []byte("xs1.a.000000000000000A.000000000002"), Bqual: x.Bqual}},
		{"short incarnation", xa.XID{FormatID: FormatID, Gtrid: []byte("xs1.a.000000000000001.000000000002"), Bqual: x.Bqual}},
		{"long checkpoint", xa.XID{FormatID: FormatID, Gtrid: []byte("xs1.a.0000000000000001.0000000000002"), Bqual: x.Bqual}},
		{"no sink", xa.XID{FormatID: FormatID, Gtrid: []byte("xs1..0000000000000001.000000000002"), Bqual: x.Bqual}},
		{"dot in sink", xa.XID{FormatID: FormatID, Gtrid: []byte("xs1.a.b.0000000000000001.000000000002"), Bqual: x.Bqual}},
		{"bit 63", xa.XID{FormatID: FormatID, Gtrid: []byte("xs1.a.8000000000000001.000000000002"), Bqual: x.Bqual}},
		{"empty target", xa.XID{FormatID: FormatID, Gtrid: x.Gtrid}},
		{"bad target", xa.XID{FormatID: FormatID, Gtrid: x.Gtrid, Bqual: []byte("a b")}},
		{"sink too long", xa.XID{FormatID: FormatID, Gtrid: []byte("xs1." + strings.Repeat("s", 25) + ".0000000000000001.000000000002"), Bqual: x.Bqual}},
		{"trailing", xa.XID{FormatID: FormatID, Gtrid: append(x.Gtrid[:len(x.Gtrid):len(x.Gtrid)], '0'), Bqual: x.Bqual}},
	} {
		if r, ok := ParseXID(tc.x); ok {
			t.Errorf("%s: ParseXID(%s) accepted %+v", tc.name, tc.x, r)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, n := range []string{"a", "orders-2024_v1", strings.Repeat("x", 24)} {
		if err := ValidateName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"", "a.b", "a b", strings.Repeat("x", 25), "é"} {
		if err := ValidateName(n); err == nil {
			t.Errorf("%q accepted", n)
		}
	}
}

// FuzzParseXID: whatever ParseXID accepts is the XID of the Ref it
// returns, and that Ref is valid.
func FuzzParseXID(f *testing.F) {
	f.Add(int32(FormatID), []byte("xs1.orders.0000000000000007.000000001234"), []byte("pg"))
	f.Add(int32(FormatID), []byte("xs1.a.4000000300000009.000000000004"), []byte("t.1"))
	f.Add(int32(xa.FormatID), []byte("xa1.node.0123456789ab0123456789abcdef"), []byte("0"))
	f.Fuzz(func(t *testing.T, format int32, gtrid, bqual []byte) {
		x := xa.XID{FormatID: format, Gtrid: gtrid, Bqual: bqual}
		r, ok := ParseXID(x)
		if !ok {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("ParseXID(%s) = %+v, invalid: %v", x, r, err)
		}
		if !r.XID().Equal(x) {
			t.Fatalf("ParseXID(%s) = %+v, whose XID is %s", x, r, r.XID())
		}
		if err := x.Validate(); err != nil {
			t.Fatalf("ParseXID accepted an invalid XID %s: %v", x, err)
		}
	})
}

// FuzzRefRoundTrip: every valid Ref survives XID, its text form (the
// PostgreSQL gid) and ParseXID.
func FuzzRefRoundTrip(f *testing.F) {
	f.Add("orders", uint64(7), uint64(0x1234), "pg")
	f.Add("s", ExternalIncarnation(MaxMember, 1<<32-1), uint64(sink.MaxCheckpoint), "t.t-t_")
	f.Fuzz(func(t *testing.T, sink string, inc, cp uint64, target string) {
		r := Ref{Sink: sink, Incarnation: inc, Checkpoint: cp, Target: target}
		if r.Validate() != nil {
			return
		}
		x, err := xa.ParseXID(r.XID().String())
		if err != nil {
			t.Fatal(err)
		}
		got, ok := ParseXID(x)
		if !ok || got != r {
			t.Fatalf("round trip of %+v gave %+v, %v", r, got, ok)
		}
	})
}
