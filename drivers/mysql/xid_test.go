package mysql

import (
	"bytes"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xadb/xa/xa"
)

func TestXIDLiteral(t *testing.T) {
	for _, c := range []struct {
		x    xa.XID
		want string
	}{
		{xa.XID{FormatID: 1, Gtrid: []byte("a")}, "X'61',X'',1"},
		{xa.XID{FormatID: 0, Gtrid: []byte{0, 0xff, '\'', '\\'}, Bqual: []byte(`"; DROP`)}, `X'00ff275c',X'223b2044524f50',0`},
		{xa.XID{FormatID: 1<<31 - 1, Gtrid: []byte("x'),X'"), Bqual: []byte{0}}, "X'7827292c5827',X'00',2147483647"},
	} {
		if got := xidLiteral(c.x); got != c.want {
			t.Errorf("xidLiteral(%v) = %s, want %s", c.x, got, c.want)
		}
	}
}

var literalRE = regexp.MustCompile(`^X'([0-9a-f]*)',X'([0-9a-f]*)',([0-9]+)$`)

// Whatever the bytes, the literal is made of hex digits inside X'...'
// and decodes back to them: no byte of an XID can leave its literal.
func FuzzXIDLiteral(f *testing.F) {
	f.Add(int32(1), []byte("gtrid"), []byte("bqual"))
	f.Add(int32(0), []byte{0, '\'', '\\', 0xff}, []byte{})
	f.Add(int32(7), []byte("';--"), []byte("*/"))
	f.Fuzz(func(t *testing.T, fid int32, g, q []byte) {
		x := xa.XID{FormatID: fid, Gtrid: g, Bqual: q}
		if x.Validate() != nil {
			return
		}
		lit := xidLiteral(x)
		m := literalRE.FindStringSubmatch(lit)
		if m == nil {
			t.Fatalf("literal %q has an unexpected shape", lit)
		}
		gg, _ := hex.DecodeString(m[1])
		qq, _ := hex.DecodeString(m[2])
		n, _ := strconv.ParseInt(m[3], 10, 64)
		if !bytes.Equal(gg, g) || !bytes.Equal(qq, q) || n != int64(fid) {
			t.Fatalf("literal %q does not decode to %v", lit, x)
		}
		p := parseRecoverRow(int64(fid), int64(len(g)), int64(len(q)), append(append([]byte{}, g...), q...))
		if !p.XID.Equal(x) || p.Raw != lit {
			t.Fatalf("parseRecoverRow: %+v; want %v / %s", p, x, lit)
		}
	})
}

func TestParseRecoverRow(t *testing.T) {
	long := bytes.Repeat([]byte("g"), 65)
	for _, c := range []struct {
		name         string
		fid, gl, bl  int64
		data         []byte
		wantXID      bool
		wantRaw      string
		wantG, wantQ string
		wantFormatID int32
	}{
		{name: "plain", fid: 1, gl: 2, bl: 1, data: []byte("abc"), wantXID: true, wantRaw: "X'6162',X'63',1", wantG: "ab", wantQ: "c", wantFormatID: 1},
		{name: "binary", fid: 0, gl: 1, bl: 2, data: []byte{0, 0xff, '\''}, wantXID: true, wantRaw: "X'00',X'ff27',0", wantG: "\x00", wantQ: "\xff'"},
		{name: "formatID beyond int32", fid: 1 << 32, gl: 1, bl: 0, data: []byte("a"), wantRaw: "X'61',X'',4294967296"},
		{name: "negative formatID", fid: -1, gl: 1, bl: 0, data: []byte("a"), wantRaw: "X'61',X'',-1"},
		{name: "gtrid too long", fid: 1, gl: 65, bl: 0, data: long, wantRaw: "X'" + hex.EncodeToString(long) + "',X'',1"},
		{name: "lengths do not add up", fid: 1, gl: 2, bl: 2, data: []byte("abc"), wantRaw: "malformed XA RECOVER row: formatID 1, gtrid_length 2, bqual_length 2, data X'616263'"},
		{name: "negative length", fid: 1, gl: -1, bl: 4, data: []byte("abc"), wantRaw: "malformed XA RECOVER row: formatID 1, gtrid_length -1, bqual_length 4, data X'616263'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := parseRecoverRow(c.fid, c.gl, c.bl, c.data)
			if p.Raw != c.wantRaw {
				t.Errorf("Raw = %s, want %s", p.Raw, c.wantRaw)
			}
			if p.XID.IsZero() == c.wantXID {
				t.Fatalf("XID = %v, want valid: %v", p.XID, c.wantXID)
			}
			if c.wantXID && (string(p.XID.Gtrid) != c.wantG || string(p.XID.Bqual) != c.wantQ || p.XID.FormatID != c.wantFormatID) {
				t.Errorf("XID = %v", p.XID)
			}
			if !p.Prepared.IsZero() {
				t.Errorf("Prepared = %v, want zero", p.Prepared)
			}
		})
	}
}

func TestFirstKeyword(t *testing.T) {
	for q, want := range map[string]string{
		"xa end x":                    "XA",
		"  \n\tCommit":                "COMMIT",
		"/* c */ set autocommit=0":    "SET",
		"-- c\nBEGIN":                 "BEGIN",
		"# c\nstart transaction":      "START",
		"/*!XA END X'00'*/":           "XA",
		"/*!50000 XA END X'00'*/":     "XA",
		"(SELECT 1)":                  "SELECT",
		"":                            "",
		"/* unterminated":             "",
		"--x":                         "",
		"INSERT INTO t VALUES ('XA')": "INSERT",
	} {
		if got := firstKeyword(q); got != want {
			t.Errorf("firstKeyword(%q) = %q, want %q", q, got, want)
		}
	}
	if !strings.Contains(xidLiteral(xa.XID{Gtrid: []byte("a")}), "X'61'") {
		t.Fatal("literal")
	}
}

// FuzzParseRecoverRow: any XA RECOVER row, however odd, is listed without
// error or panic, and is taken for a valid XID only when it is exactly one.
func FuzzParseRecoverRow(f *testing.F) {
	f.Add(int64(1), int64(2), int64(1), []byte("abc"))
	f.Add(int64(0x78610001), int64(3), int64(1), []byte("xa1.0"))
	f.Add(int64(-1), int64(-1), int64(9), []byte{0, 0xff, '\''})
	f.Fuzz(func(t *testing.T, fid, gl, bl int64, data []byte) {
		p := parseRecoverRow(fid, gl, bl, data)
		if p.Raw == "" {
			t.Fatal("no Raw text")
		}
		if p.XID.IsZero() {
			return
		}
		if p.XID.Validate() != nil || int64(p.XID.FormatID) != fid || !bytes.Equal(append(append([]byte{}, p.XID.Gtrid...), p.XID.Bqual...), data) ||
			int64(len(p.XID.Gtrid)) != gl {
			t.Fatalf("row (%d, %d, %d, %x) gave XID %#v", fid, gl, bl, data, p.XID)
		}
	})
}
