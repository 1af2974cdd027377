package sqlsink

import (
	"errors"
	"math/big"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/xadb/xa/sink"
)

func TestJSONMapping(t *testing.T) {
	at := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	rec := sink.Record{Partition: "events/3", Next: "42", Key: []byte("k-1"), Time: at,
		Value: []byte(` {"id": 17, "big": 12345678901234567890, "f": 1.5, "s": "x", "b": true, "n": null,
			"o": {"a": [10, {"key": "deep"}]}, "arr": [1, 2]} `)}
	for _, tc := range []struct {
		from string
		want any
	}{
		{"key", "k-1"},
		{"partition", "events/3"},
		{"position", "42"},
		{"time", at},
		{"$.id", int64(17)},
		{"$.big", "12345678901234567890"}, // beyond int64 and float64: the text
		{"$.f", 1.5},
		{"$.s", "x"},
		{"$.b", true},
		{"$.n", nil},
		{"$.missing", nil},
		{"$.o.a[0]", int64(10)},
		{"$.o.a[1].key", "deep"},
		{"$.o.a[2]", nil},
		{"$.o.a.x", nil},
		{"$.s.x", nil},
		{"$.arr", "[1,2]"},
		{"$.o", `{"a":[10,{"key":"deep"}]}`},
		{"$", `{"id": 17, "big": 12345678901234567890, "f": 1.5, "s": "x", "b": true, "n": null,
			"o": {"a": [10, {"key": "deep"}]}, "arr": [1, 2]}`},
	} {
		m, err := JSONMapping([]Table{{Name: "t", Columns: []Column{{Name: "c", From: tc.from}}}})
		if err != nil {
			t.Errorf("%s: %v", tc.from, err)
			continue
		}
		rows, err := m(rec)
		if err != nil {
			t.Errorf("%s: %v", tc.from, err)
			continue
		}
		if len(rows) != 1 || rows[0].Table != "t" || !reflect.DeepEqual(rows[0].Values, []any{tc.want}) {
			t.Errorf("%s: %#v, want %#v", tc.from, rows, tc.want)
		}
	}
}

func TestJSONMappingErrors(t *testing.T) {
	// A source that is neither a word nor a path starting with $ ("a",
	// "partiton") is refused: a typo would otherwise map every record's
	// column to NULL (found by a walkthrough: src: partiton wrote NULLs).
	for _, from := range []string{"", "$x", "$..a", "$.a..b", "$.a.", "$.a[", "$.a[x]", "$.a[-1]", "$.a[01]", "$.a]b", "$.a[0]b", ".a",
		"a", "a.b", "partiton", "Key", "$$"} {
		if _, err := JSONMapping([]Table{{Name: "t", Columns: []Column{{Name: "c", From: from}}}}); !errors.Is(err, sink.ErrConfig) {
			t.Errorf("From %q: %v, want sink.ErrConfig", from, err)
		}
	}
	m, err := JSONMapping([]Table{{Name: "t", Columns: []Column{{Name: "c", From: "$.a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"", "{", "[1] [2]", "nope"} {
		if _, err := m(sink.Record{Value: []byte(v)}); err == nil {
			t.Errorf("value %q mapped", v)
		}
	}
	// Columns that need no JSON do not parse the value.
	m, _ = JSONMapping([]Table{{Name: "t", Columns: []Column{{Name: "c", From: "key"}}}})
	if _, err := m(sink.Record{Value: []byte("not json"), Key: []byte("k")}); err != nil {
		t.Errorf("a key-only mapping parsed the value: %v", err)
	}
}

func TestMappingTwoTables(t *testing.T) {
	m, err := JSONMapping([]Table{
		{ID: "a", Name: "t", Columns: []Column{{Name: "x", From: "$.v"}, {Name: "p", From: "partition"}}},
		{ID: "b", Name: "t", Columns: []Column{{Name: "y", From: "$.w"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := m(sink.Record{Partition: "p1", Value: []byte(`{"v":"1","w":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{{Table: "a", Values: []any{"1", "p1"}}, {Table: "b", Values: []any{int64(2)}}}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("%#v, want %#v", rows, want)
	}
}

func TestColumnsFromMap(t *testing.T) {
	got := ColumnsFromMap(map[string]string{"z": "key", "a": "$.a", "m": "time"})
	want := []Column{{"a", "$.a"}, {"m", "time"}, {"z", "key"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

func TestTableValidate(t *testing.T) {
	cols := []Column{{Name: "a"}, {Name: "b"}}
	for _, tc := range []struct {
		t  Table
		ok bool
	}{
		{Table{Name: "t", Columns: cols}, true},
		{Table{Name: "s.t", Columns: cols, Upsert: true, Key: []string{"a"}}, true},
		{Table{Name: "", Columns: cols}, false},
		{Table{Name: "a.b.c", Columns: cols}, false},
		{Table{Name: "t."}, false},
		{Table{Name: "t"}, false},
		{Table{Name: "t", Columns: []Column{{Name: "a"}, {Name: "a"}}}, false},
		{Table{Name: "t", Columns: cols, Upsert: true}, false},
		{Table{Name: "t", Columns: cols, Upsert: true, Key: []string{"c"}}, false},
	} {
		if err := tc.t.validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.t, err)
		}
	}
}

func TestUpsertBufferKeepsLastPerKey(t *testing.T) {
	tg := &target{cfg: TargetConfig{Name: "x", Driver: DriverPostgres}.withDefaults(), d: postgresDialect{}}
	tb := compileTable(Table{Name: "t", Columns: []Column{{Name: "k"}, {Name: "v"}}, Upsert: true, Key: []string{"k"}}, tg)
	var b buffer
	b.add(tb, []any{int64(1), "a"}, false, nil)
	b.add(tb, []any{int64(2), "b"}, false, nil)
	b.add(tb, []any{"1", "c"}, false, nil) // the same key, as text
	want := [][]any{{"1", "c"}, {int64(2), "b"}}
	if !reflect.DeepEqual(b.rows, want) {
		t.Fatalf("%v, want %v", b.rows, want)
	}
	if tb.sql.conflict != ` ON CONFLICT ("k") DO UPDATE SET "v" = EXCLUDED."v"` || tb.sql.insert != `INSERT INTO "t" ("k","v") VALUES ` {
		t.Fatalf("statement: %q ... %q", tb.sql.insert, tb.sql.conflict)
	}
	my := compileTable(Table{Name: "s.t", Columns: []Column{{Name: "k"}, {Name: "v`"}}, Upsert: true, Key: []string{"k"}},
		&target{cfg: TargetConfig{Name: "m", Driver: DriverMySQL}, d: mysqlDialect{}})
	if my.sql.insert != "INSERT INTO `s`.`t` (`k`,`v```) VALUES " || my.sql.row != "(?,?)" || my.sql.conflict != " ON DUPLICATE KEY UPDATE `v```=VALUES(`v```)" {
		t.Fatalf("statement: %q %q %q", my.sql.insert, my.sql.row, my.sql.conflict)
	}
}

func TestOrigins(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	bs := []BranchState{{Target: "pg"}, {Target: "my.b", Session: 42, Prepared: at}, {Target: "my-a", Session: 7}}
	s := encodeOrigins(bs)
	if s != "my-a=7:0;my.b=42:1700000000123456789" {
		t.Fatalf("encoded: %q", s)
	}
	got := decodeOrigins(s)
	if got["my.b"].Session != 42 || !got["my.b"].Prepared.Equal(at) || got["my-a"].Session != 7 || !got["my-a"].Prepared.IsZero() || len(got) != 2 {
		t.Fatalf("decoded: %+v", got)
	}
	if len(decodeOrigins("")) != 0 || len(decodeOrigins("x=1;y=a:b;=;z")) != 0 {
		t.Fatal("malformed origins decoded")
	}
}

// TestJSONNumbersExact checks that the JSON mapping never changes a number:
// one beyond int64, or with more digits than a float64 holds, is written
// as its JSON text (the database converts it exactly), and one a float64
// holds exactly stays a float64. Found by an adversarial review: such
// numbers became float64s, another number, silently ("JSON number
// 18446744073709551615 is written as float64 1.8446744073709552e+19
// (18446744073709551616.00)", and likewise 12345678901234567.25 and
// -9223372036854775809).
func TestJSONNumbersExact(t *testing.T) {
	f, err := JSONMapping([]Table{{Name: "t", Columns: []Column{{Name: "n", From: "$.n"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		lit  string
		want any
	}{
		{"18446744073709551615", "18446744073709551615"},
		{"9223372036854775808", "9223372036854775808"},
		{"-9223372036854775809", "-9223372036854775809"},
		{"12345678901234567.25", "12345678901234567.25"},
		{"0.1000000000000000000001", "0.1000000000000000000001"},
		{"1e400", "1e400"},
		{"9223372036854775807", int64(9223372036854775807)},
		{"-17", int64(-17)},
		{"1.5", 1.5},
		{"0.1", 0.1},
		{"1.50", 1.5},
		{"2.5e-3", 0.0025},
		{"1E2", 100.0},
	} {
		rows, err := f(sink.Record{Partition: "p", Next: "1", Value: []byte(`{"n": ` + c.lit + `}`)})
		if err != nil {
			t.Fatalf("%s: %v", c.lit, err)
		}
		if got := rows[0].Values[0]; got != c.want {
			t.Errorf("JSON number %s is written as %T %v, want %T %v", c.lit, got, got, c.want, c.want)
		}
		// Whatever the Go type, the value is the number's.
		var have *big.Rat
		switch v := rows[0].Values[0].(type) {
		case int64:
			have = new(big.Rat).SetInt64(v)
		case float64:
			have, _ = new(big.Rat).SetString(strconv.FormatFloat(v, 'g', -1, 64))
		case string:
			have, _ = new(big.Rat).SetString(v)
		}
		if want, ok := new(big.Rat).SetString(c.lit); ok && (have == nil || have.Cmp(want) != 0) {
			t.Errorf("JSON number %s is written as %v: another number", c.lit, rows[0].Values[0])
		}
	}
}
