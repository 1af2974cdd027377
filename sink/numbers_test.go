package sink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/testrig/dbtest"
)

// numberColumn is a column type to write numbers into: a name for its
// tables and the type on MariaDB and on PostgreSQL.
type numberColumn struct{ name, my, pg string }

// numberResult is what one number became: the column's text, or the
// checkpoint's error.
type numberResult struct {
	got string
	err error
}

// writeNumbers writes each JSON number of values through the JSON mapping
// into a column of each type, one checkpoint per (table, value), on MariaDB
// (INSERT, table my.<type>), PostgreSQL COPY (INSERT, pg.<type>) and
// PostgreSQL upsert (pgup.<type>); the result is keyed "<table id> <value>".
func writeNumbers(t *testing.T, types []numberColumn, values []string) map[string]numberResult {
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var tables []Table
	for _, tp := range types {
		if err := my.Server.Exec(ctx, my.Name, fmt.Sprintf("CREATE TABLE n_%s (k VARCHAR(64) PRIMARY KEY, v %s)", tp.name, tp.my)); err != nil {
			t.Fatal(err)
		}
		if err := pg.Server.Exec(ctx, pg.Name, fmt.Sprintf("CREATE TABLE n_%s (k text PRIMARY KEY, v %s)", tp.name, tp.pg),
			fmt.Sprintf("CREATE TABLE u_%s (k text PRIMARY KEY, v %s)", tp.name, tp.pg)); err != nil {
			t.Fatal(err)
		}
		cols := []Column{{Name: "k", From: "key"}, {Name: "v", From: "$.v"}}
		tables = append(tables,
			Table{ID: "my." + tp.name, Target: "maria", Name: "n_" + tp.name, Columns: cols},
			Table{ID: "pg." + tp.name, Target: "pg", Name: "n_" + tp.name, Columns: cols},
			Table{ID: "pgup." + tp.name, Target: "pg", Name: "u_" + tp.name, Columns: cols, Upsert: true, Key: []string{"k"}})
	}
	mapFns := map[string]MapFunc{}
	for _, tb := range tables {
		f, err := JSONMapping([]Table{tb})
		if err != nil {
			t.Fatal(err)
		}
		mapFns[tb.ID] = f
	}
	cfg := Config{
		Name: fmt.Sprintf("rv%d", time.Now().UnixNano()%1000000),
		Targets: []TargetConfig{
			{Name: "maria", Driver: DriverMySQL, DSN: my.DSN(), Init: true},
			{Name: "pg", Driver: DriverPostgres, DSN: pg.DSN(), Init: true},
		},
		Progress:       "maria",
		Tables:         tables,
		Phase2Attempts: 2, Phase2Timeout: 2 * time.Second,
		Map: func(r Record) ([]Row, error) {
			return mapFns[r.Partition](r) // the partition names the table
		},
	}
	if err := Setup(ctx, cfg.Targets[0]); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Bind(ctx); err != nil {
		t.Fatal(err)
	}
	ext, err := s.External(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	cp := uint64(0)
	out := map[string]numberResult{}
	for _, tb := range tables {
		for i, v := range values {
			cp += 10
			rec := Record{Partition: tb.ID, Next: fmt.Sprint(i + 1), Key: []byte(v), Value: []byte(`{"v": ` + v + `}`)}
			err := ext.Write(ctx, []Record{rec})
			var h Handle
			if err == nil {
				h, err = ext.PreCommit(ctx, cp)
			}
			if err == nil {
				err = ext.Commit(ctx, h)
			}
			got := "-"
			if err == nil {
				var sv sql.NullString
				var qerr error
				if tb.Target == "maria" {
					qerr = db.QueryRowContext(ctx, "SELECT CAST(v AS CHAR) FROM "+tb.Name+" WHERE k = ?", v).Scan(&sv)
				} else {
					qerr = c.QueryRow(ctx, "SELECT v::text FROM "+tb.Name+" WHERE k = $1", v).Scan(&sv)
				}
				got = sv.String
				if qerr != nil {
					got = "query: " + qerr.Error()
				}
			}
			out[tb.ID+" "+v] = numberResult{got, err}
			t.Logf("%-10s %-26s -> %-28s err=%v", tb.ID, v, got, err)
		}
	}
	return out
}

// TestJSONExponentNumberCopyNumeric checks that a JSON number the mapping
// passes as its JSON text (no int64 or float64 holds it) lands exactly in
// a MariaDB DECIMAL and a PostgreSQL numeric, through COPY (INSERT tables)
// as through the upsert, whatever its form: the sink writes a numeral in
// exponent form into a NUMERIC/DECIMAL column in plain decimal notation.
// Found by a review, a regression of the change that passed such numbers
// as text: PostgreSQL COPY refused every one in exponent form, and the
// checkpoint aborted every time (a poison record):
//
//	pg.num 1.00000000000000000001e5 -> sink: copying 1 rows to n_num on pg: ERROR: COPY from stdin failed:
//	  unable to encode "1.00000000000000000001e5" into binary format for numeric (OID 1700): cannot find encode plan
//
// 1e400 lands in PostgreSQL's numeric and is refused (out of range) by
// DECIMAL(40,20), never changed.
func TestJSONExponentNumberCopyNumeric(t *testing.T) {
	vals := []string{"1.00000000000000000001e5", "123456789012345678901234567890e-10", "1e400", "-2.5E-3"}
	want := map[string]string{
		"1.00000000000000000001e5":           "100000.000000000000001",
		"123456789012345678901234567890e-10": "12345678901234567890.1234567890",
		"1e400":                              "1" + strings.Repeat("0", 400),
		"-2.5E-3":                            "-0.0025",
	}
	res := writeNumbers(t, []numberColumn{{"num", "DECIMAL(40,20)", "numeric"}}, vals)
	for _, v := range vals {
		for _, tb := range []string{"my.num", "pgup.num", "pg.num"} {
			r := res[tb+" "+v]
			switch {
			case tb == "my.num" && v == "1e400":
				if r.err == nil {
					t.Errorf("%s: JSON number %s landed as %q in DECIMAL(40,20), want it refused", tb, v, r.got)
				}
			case r.err != nil:
				t.Errorf("%s: JSON number %s did not land: %v", tb, v, r.err)
			case tb != "my.num" && r.got != want[v]:
				t.Errorf("%s: JSON number %s landed as %q, want %s", tb, v, r.got, want[v])
			}
		}
	}
}

// TestJSONNumberIntoText checks that a JSON number mapped into a text
// column lands as its JSON text on both databases, through COPY and the
// upsert alike (the sink writes a Go number into a text column as text).
// Found by a review: PostgreSQL refused an int64 or a float64 for a text
// column on every checkpoint while MariaDB took it, and took numbers the
// mapping passed as text, so one column took some numbers and refused
// others:
//
//	pg.txt 42 -> sink: copying 1 rows to n_txt on pg: ERROR: COPY from stdin failed:
//	  unable to encode 42 into binary format for text (OID 25): cannot find encode plan
//	pgup.txt 1.5 -> sink: upserting rows to u_txt on pg: ... unable to encode 1.5 into text format for text (OID 25)
func TestJSONNumberIntoText(t *testing.T) {
	vals := []string{"42", "1.5", "12345678901234567890"}
	res := writeNumbers(t, []numberColumn{{"txt", "VARCHAR(100)", "text"}}, vals)
	for _, v := range vals {
		for _, tb := range []string{"my.txt", "pg.txt", "pgup.txt"} {
			if r := res[tb+" "+v]; r.err != nil || r.got != v {
				t.Errorf("%s: JSON number %s -> %q, %v; want it written as %s", tb, v, r.got, r.err, v)
			}
		}
	}
}

// TestJSONFractionIntoInteger checks that a JSON number that is not an
// integer is refused for an integer column (a *ValueError in the record's
// MappingError; the checkpoint aborts), on both databases and both paths,
// and that an integer in another form (1.0, 1e3, beyond float64's
// exactness) lands as that integer. Found by a review: the number was
// changed, differently per database and per path:
//
//	my.i64 1.5 -> 2, my.i64 0.30000000000000001 -> 0 (MariaDB rounds)
//	pg.i64 1.5 -> 1, pgup.i64 1.5 -> 1 (pgx truncates the float64)
func TestJSONFractionIntoInteger(t *testing.T) {
	bad := []string{"1.5", "0.30000000000000001", "-1e-30"}
	good := map[string]string{"1.0": "1", "1e3": "1000", "-7.00E1": "-70", "9007199254740993": "9007199254740993"}
	vals := append([]string(nil), bad...)
	for v := range good {
		vals = append(vals, v)
	}
	res := writeNumbers(t, []numberColumn{{"i64", "BIGINT", "bigint"}}, vals)
	for _, tb := range []string{"my.i64", "pg.i64", "pgup.i64"} {
		for _, v := range bad {
			r := res[tb+" "+v]
			var ve *ValueError
			if r.err == nil {
				t.Errorf("%s: fractional JSON number %s landed in an integer column as %q (changed), want it refused", tb, v, r.got)
			} else if !errors.As(r.err, &ve) || ve.Column != "v" {
				t.Errorf("%s: fractional JSON number %s refused with %v, want a *ValueError of column v", tb, v, r.err)
			}
		}
		for v, w := range good {
			if r := res[tb+" "+v]; r.err != nil || r.got != w {
				t.Errorf("%s: JSON number %s -> %q, %v; want %s", tb, v, r.got, r.err, w)
			}
		}
	}
}

// TestFitValue checks the per-column conversions of table.fit on values
// of any Map: integer columns refuse fractions and take integers in any
// form, NUMERIC/DECIMAL columns get plain decimal notation, text columns
// get numbers as their JSON text.
func TestFitValue(t *testing.T) {
	for _, c := range []struct {
		k    colKind
		v    any
		want any // nil: written as it is
		err  bool
	}{
		{kindInteger, 1.5, nil, true},
		{kindInteger, float32(0.5), nil, true},
		{kindInteger, "0.30000000000000001", nil, true},
		{kindInteger, " 2.5 ", nil, true},
		{kindInteger, "1e-400", nil, true},
		{kindInteger, 3.0, int64(3), false},
		{kindInteger, 1e19, "10000000000000000000", false},
		{kindInteger, "1.000", int64(1), false},
		{kindInteger, "-0.0", int64(0), false},
		{kindInteger, "12345678901234567890", "12345678901234567890", false},
		{kindInteger, "abc", nil, false},
		{kindInteger, int64(5), nil, false},
		{kindDecimal, "1.5e3", "1500", false},
		{kindDecimal, "1.50", nil, false},
		{kindDecimal, ".5", "0.5", false},
		{kindDecimal, "-12e-5", "-0.00012", false},
		{kindDecimal, "1e999999999999", nil, false},
		{kindDecimal, 1.5, nil, false},
		{kindFloat, "0.30000000000000001", 0.3, false},
		{kindText, int64(42), "42", false},
		{kindText, 1.5, "1.5", false},
		{kindText, 1e21, "1e+21", false},
		{kindText, uint64(18446744073709551615), "18446744073709551615", false},
		{kindText, "x", nil, false},
		{kindOther, 1.5, nil, false},
	} {
		got, err := fitValue(c.k, c.v)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("kind %d, %T %v: %T %v, %v; want %T %v, error %v", c.k, c.v, c.v, got, got, err, c.want, c.want, c.err)
		}
	}
}
