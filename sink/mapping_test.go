package sink

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestJSONMapping(t *testing.T) {
	at := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	rec := Record{Partition: "events/3", Next: "42", Key: []byte("k-1"), Time: at,
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
		{"id", int64(17)},
		{"$.big", 12345678901234567890.0},
		{"f", 1.5},
		{"s", "x"},
		{"b", true},
		{"n", nil},
		{"missing", nil},
		{"o.a[0]", int64(10)},
		{"$.o.a[1].key", "deep"},
		{"o.a[2]", nil},
		{"o.a.x", nil},
		{"s.x", nil},
		{"arr", "[1,2]"},
		{"o", `{"a":[10,{"key":"deep"}]}`},
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
	for _, from := range []string{"", "$x", "$..a", "a..b", "a.", "a[", "a[x]", "a[-1]", "a[01]", "a]b", "a[0]b", ".a"} {
		if _, err := JSONMapping([]Table{{Name: "t", Columns: []Column{{Name: "c", From: from}}}}); !errors.Is(err, ErrConfig) {
			t.Errorf("From %q: %v, want ErrConfig", from, err)
		}
	}
	m, err := JSONMapping([]Table{{Name: "t", Columns: []Column{{Name: "c", From: "a"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"", "{", "[1] [2]", "nope"} {
		if _, err := m(Record{Value: []byte(v)}); err == nil {
			t.Errorf("value %q mapped", v)
		}
	}
	// Columns that need no JSON do not parse the value.
	m, _ = JSONMapping([]Table{{Name: "t", Columns: []Column{{Name: "c", From: "key"}}}})
	if _, err := m(Record{Value: []byte("not json"), Key: []byte("k")}); err != nil {
		t.Errorf("a key-only mapping parsed the value: %v", err)
	}
}

func TestMappingTwoTables(t *testing.T) {
	m, err := JSONMapping([]Table{
		{ID: "a", Name: "t", Columns: []Column{{Name: "x", From: "v"}, {Name: "p", From: "partition"}}},
		{ID: "b", Name: "t", Columns: []Column{{Name: "y", From: "w"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := m(Record{Partition: "p1", Value: []byte(`{"v":"1","w":2}`)})
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
	tg := &target{cfg: TargetConfig{Name: "x", Driver: DriverPostgres}.withDefaults()}
	tb := compileTable(Table{Name: "t", Columns: []Column{{Name: "k"}, {Name: "v"}}, Upsert: true, Key: []string{"k"}}, tg)
	var b buffer
	b.add(tb, []any{int64(1), "a"})
	b.add(tb, []any{int64(2), "b"})
	b.add(tb, []any{"1", "c"}) // the same key, as text
	want := [][]any{{"1", "c"}, {int64(2), "b"}}
	if !reflect.DeepEqual(b.rows, want) {
		t.Fatalf("%v, want %v", b.rows, want)
	}
	if tb.pgSuffix != ` ON CONFLICT ("k") DO UPDATE SET "v" = EXCLUDED."v"` || tb.pgPrefix != `INSERT INTO "t" ("k","v") VALUES ` {
		t.Fatalf("statement: %q ... %q", tb.pgPrefix, tb.pgSuffix)
	}
	my := compileTable(Table{Name: "s.t", Columns: []Column{{Name: "k"}, {Name: "v`"}}, Upsert: true, Key: []string{"k"}},
		&target{cfg: TargetConfig{Name: "m", Driver: DriverMySQL}})
	if my.myPrefix != "INSERT INTO `s`.`t` (`k`,`v```) VALUES " || my.myRow != "(?,?)" || my.mySuffix != " ON DUPLICATE KEY UPDATE `v```=VALUES(`v```)" {
		t.Fatalf("statement: %q %q %q", my.myPrefix, my.myRow, my.mySuffix)
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
