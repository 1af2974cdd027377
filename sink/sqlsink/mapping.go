package sqlsink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/xadb/xa/sink"
)

// Table is one table of a target that the sink writes.
type Table struct {
	// ID names the table in Rows; default Name. Unique within the sink.
	ID string
	// Target is the name of the target (participant) holding the table.
	Target string
	// Name is the table, "table" or "schema.table".
	Name string
	// Columns are the columns written, in the order of Row.Values.
	Columns []Column
	// Upsert: insert, or update the row with the same Key (MySQL: ON
	// DUPLICATE KEY UPDATE, PostgreSQL: ON CONFLICT (Key) DO UPDATE).
	// Otherwise plain INSERT (a duplicate key aborts the checkpoint).
	Upsert bool
	// Key lists the columns of the unique key an upsert matches on;
	// required with Upsert, and every one must be in Columns.
	Key []string
	// Required lists columns whose JSON path (From) must reach a value in
	// every record: a field or an index the value lacks (a misspelt path,
	// an event of another shape) makes the record a bad record (a
	// *MappingError wrapping a *MissingError) instead of a NULL. A JSON
	// null that is there is a value (a NOT NULL column refuses it). Each
	// must be in Columns, with a JSON path.
	Required []string
}

// Column is one column of a Table and, for the JSON mapping, where its
// value comes from.
type Column struct {
	Name string
	// From says where the value comes from when the sink maps records
	// itself (no Config.Map):
	//   - "key", "partition", "position", "time": the record's key (text),
	//     partition, position after it (Next) and time;
	//   - "$": the whole value, as JSON text;
	//   - a JSON path into the value, starting with "$": "$.a.b[0].c",
	//     "$[1]". Anything else is refused: a misspelt word above would
	//     otherwise read as a field that is missing in every record and
	//     land as NULL. A missing field is NULL. Strings, booleans and null are
	//     written as such, objects and arrays as JSON text. A number is
	//     written as an int64 if it is one, else as a float64 if that
	//     holds it exactly (its shortest decimal form is the same number),
	//     else as its JSON text: a number is never changed by the mapping.
	//     The sink then writes each value for its column's type (see
	//     docs/sink.md, "Values and column types"): a number that is not
	//     an integer is refused for an integer column, a number in
	//     exponent form goes to a NUMERIC/DECIMAL column in plain decimal
	//     notation, and a number goes to a text column as its text.
	From string
}

// Row is one row for a table: Values in the order of the table's Columns.
type Row struct {
	Table  string
	Values []any
	// Delete: delete the table's row whose key is the Key columns' values
	// (the other values are ignored) instead of writing a row; only for
	// an upsert table. Within a checkpoint the last row or delete of a
	// key, in source order, is what is applied.
	Delete bool
}

// MapFunc turns a record into rows (any number, for any tables). An error
// aborts the checkpoint (see MappingError).
type MapFunc func(r sink.Record) ([]Row, error)

// ColumnsFromMap returns the columns of a {column: from} mapping (the
// configuration's form), ordered by column name.
func ColumnsFromMap(m map[string]string) []Column {
	cols := make([]Column, 0, len(m))
	for name, from := range m {
		cols = append(cols, Column{Name: name, From: from})
	}
	slices.SortFunc(cols, func(a, b Column) int { return strings.Compare(a.Name, b.Name) })
	return cols
}

// source kinds of a column.
const (
	srcPath = iota
	srcKey
	srcPartition
	srcPosition
	srcTime
	srcWhole
)

type step struct {
	field string
	index int // -1: a field step
}

type colSource struct {
	kind     int
	path     []step
	required bool
}

// MissingError is a required column's JSON path that a record's value
// does not reach (Column.Required).
type MissingError struct {
	Column string
	Path   string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("column %s: %s is not in the value, and the column is required", e.Column, e.Path)
}

// parseFrom compiles a Column.From.
func parseFrom(from string) (colSource, error) {
	switch from {
	case "key":
		return colSource{kind: srcKey}, nil
	case "partition":
		return colSource{kind: srcPartition}, nil
	case "position":
		return colSource{kind: srcPosition}, nil
	case "time":
		return colSource{kind: srcTime}, nil
	case "$":
		return colSource{kind: srcWhole}, nil
	case "":
		return colSource{}, errors.New("no source (From is empty)")
	}
	p := from
	if !strings.HasPrefix(p, "$") {
		return colSource{}, fmt.Errorf("source %q: want key, partition, position, time, $ (the whole value) or a JSON path starting with $ ($.%s)", from, from)
	}
	p = p[1:]
	if !strings.HasPrefix(p, ".") && !strings.HasPrefix(p, "[") {
		return colSource{}, fmt.Errorf("JSON path %q: want $.field or $[index] after $", from)
	}
	p = strings.TrimPrefix(p, ".")
	var steps []step
	for p != "" {
		if p[0] == '[' {
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return colSource{}, fmt.Errorf("JSON path %q: unclosed [", from)
			}
			n, err := strconv.Atoi(p[1:end])
			if err != nil || n < 0 || (end > 2 && p[1] == '0') {
				return colSource{}, fmt.Errorf("JSON path %q: index %q is not a non-negative integer", from, p[1:end])
			}
			steps = append(steps, step{index: n})
			p = p[end+1:]
			if strings.HasPrefix(p, ".") {
				p = p[1:]
				if p == "" || p[0] == '.' || p[0] == '[' {
					return colSource{}, fmt.Errorf("JSON path %q: empty field name", from)
				}
			} else if p != "" && p[0] != '[' {
				return colSource{}, fmt.Errorf("JSON path %q: want . or [ after ]", from)
			}
			continue
		}
		end := strings.IndexAny(p, ".[")
		if end < 0 {
			end = len(p)
		}
		if end == 0 {
			return colSource{}, fmt.Errorf("JSON path %q: empty field name", from)
		}
		if strings.ContainsRune(p[:end], ']') {
			return colSource{}, fmt.Errorf("JSON path %q: ] without [", from)
		}
		steps = append(steps, step{field: p[:end], index: -1})
		p = p[end:]
		if strings.HasPrefix(p, ".") {
			p = p[1:]
			if p == "" || p[0] == '.' || p[0] == '[' {
				return colSource{}, fmt.Errorf("JSON path %q: empty field name", from)
			}
		}
	}
	if len(steps) == 0 {
		return colSource{}, fmt.Errorf("JSON path %q: empty", from)
	}
	return colSource{kind: srcPath, path: steps}, nil
}

// errMissing: a JSON path does not reach a value.
var errMissing = errors.New("sqlsink: not in the value")

// value returns the column's value for r (errMissing: its JSON path does
// not reach one); doc is r.Value decoded, or nil
// when no column needs it.
func (c colSource) value(r *sink.Record, doc any) (any, error) {
	switch c.kind {
	case srcKey:
		if r.Key == nil {
			return nil, nil
		}
		return string(r.Key), nil
	case srcPartition:
		return r.Partition, nil
	case srcPosition:
		return r.Next, nil
	case srcTime:
		if r.Time.IsZero() {
			return nil, nil
		}
		return r.Time, nil
	case srcWhole:
		return string(bytes.TrimSpace(r.Value)), nil
	}
	v := doc
	for _, s := range c.path {
		switch x := v.(type) {
		case map[string]any:
			if s.index >= 0 {
				return nil, errMissing
			}
			f, ok := x[s.field]
			if !ok {
				return nil, errMissing
			}
			v = f
		case []any:
			if s.index < 0 || s.index >= len(x) {
				return nil, errMissing
			}
			v = x[s.index]
		default:
			return nil, errMissing
		}
	}
	return jsonValue(v)
}

// jsonValue converts a decoded JSON value to what is written to a column.
func jsonValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, string, bool:
		return x, nil
	case json.Number:
		return jsonNumber(string(x)), nil
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return nil, err
		}
		return string(b), nil
	}
}

// jsonNumber returns a JSON number as an int64 if it is one, else as a
// float64 if that is the same number (its shortest decimal form has the
// number's value), else as its JSON text: a value is never changed on the
// way to the database; table.fit then writes it for its column's type
// (plain decimal notation for NUMERIC and DECIMAL, exactly; a fraction is
// refused for an integer column).
func jsonNumber(text string) any {
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		return i
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return text // beyond float64's range
	}
	short := strconv.FormatFloat(f, 'g', -1, 64)
	if short == text {
		return f
	}
	want, ok1 := new(big.Rat).SetString(text)
	have, ok2 := new(big.Rat).SetString(short)
	if ok1 && ok2 && want.Cmp(have) == 0 {
		return f
	}
	return text
}

// JSONMapping returns the MapFunc of the tables' column mappings: every
// record gives one row to every table, each column's value taken from
// Column.From.
//
// A tombstone (a record whose value is null: Record.Value nil) deletes
// the row of its key from every table, which must then be an upsert table
// whose Key columns all come from the record's key (From "key"); for any
// other table a tombstone has no row to delete, and it is a bad record
// (docs/sink.md, "Tombstones"), as is a tombstone without a key.
func JSONMapping(tables []Table) (MapFunc, error) {
	m, err := compileMapping(tables)
	if err != nil {
		return nil, err
	}
	return func(r sink.Record) ([]Row, error) {
		if r.Value == nil {
			return m.tombstone(&r)
		}
		var doc any
		if m.needDoc {
			var err error
			if doc, err = decodeJSON(r.Value); err != nil {
				return nil, err
			}
		}
		return m.rows(&r, doc, nil, false)
	}, nil
}

// mapping is the tables' column mappings, compiled.
type mapping struct {
	tabs    []mappedTable
	needDoc bool
}

type mappedTable struct {
	id     string
	upsert bool
	key    []int // indexes of the Key columns in srcs
	srcs   []colSource
	names  []string
	froms  []string
}

func compileMapping(tables []Table) (*mapping, error) {
	m := &mapping{}
	for _, t := range tables {
		tb := mappedTable{id: t.id(), upsert: t.Upsert}
		for _, c := range t.Columns {
			s, err := parseFrom(c.From)
			if err != nil {
				return nil, fmt.Errorf("%w: table %s column %s: %v", sink.ErrConfig, t.id(), c.Name, err)
			}
			req := slices.Contains(t.Required, c.Name)
			if req && s.kind != srcPath {
				return nil, fmt.Errorf("%w: table %s column %s: required is for a JSON path, not %q", sink.ErrConfig, t.id(), c.Name, c.From)
			}
			s.required = req
			m.needDoc = m.needDoc || s.kind == srcPath
			if slices.Contains(t.Key, c.Name) {
				tb.key = append(tb.key, len(tb.srcs))
			}
			tb.srcs = append(tb.srcs, s)
			tb.names = append(tb.names, c.Name)
			tb.froms = append(tb.froms, c.From)
		}
		for _, r := range t.Required {
			if !slices.Contains(tb.names, r) {
				return nil, fmt.Errorf("%w: table %s: required column %s is not among its columns", sink.ErrConfig, t.id(), r)
			}
		}
		m.tabs = append(m.tabs, tb)
	}
	return m, nil
}

// decodeJSON decodes a record's value, numbers as json.Number.
func decodeJSON(b []byte) (any, error) {
	var doc any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("value is not JSON: %w", err)
	}
	if d.More() {
		return nil, errors.New("value holds more than one JSON value")
	}
	return doc, nil
}

// rows maps r to one row per table, its JSON paths into doc. whole, if
// not nil, is the value of a column "$" (else r.Value as text). del: the
// rows are deletes by key, and only the key columns are mapped (each must
// reach a value).
func (m *mapping) rows(r *sink.Record, doc any, whole any, del bool) ([]Row, error) {
	rows := make([]Row, len(m.tabs))
	for i, t := range m.tabs {
		vals := make([]any, len(t.srcs))
		for j, s := range t.srcs {
			if del && !slices.Contains(t.key, j) {
				continue
			}
			var v any
			var err error
			if s.kind == srcWhole && whole != nil {
				v, err = jsonValue(whole)
			} else {
				v, err = s.value(r, doc)
			}
			switch {
			case err == errMissing && (s.required || del):
				return nil, fmt.Errorf("table %s: %w", t.id, &MissingError{Column: t.names[j], Path: t.froms[j]})
			case err == errMissing:
				v = nil
			case err != nil:
				return nil, fmt.Errorf("table %s column %s: %w", t.id, t.names[j], err)
			}
			if del && v == nil {
				return nil, fmt.Errorf("table %s: a delete whose key column %s (%s) is null", t.id, t.names[j], t.froms[j])
			}
			vals[j] = v
		}
		rows[i] = Row{Table: t.id, Values: vals, Delete: del}
	}
	return rows, nil
}

// tombstone maps a record without a value to deletes by its key.
func (m *mapping) tombstone(r *sink.Record) ([]Row, error) {
	for _, t := range m.tabs {
		if !t.upsert {
			return nil, fmt.Errorf("a tombstone (a record whose value is null) for table %s, which is not an upsert table: it has no row to delete", t.id)
		}
		for _, j := range t.key {
			if t.srcs[j].kind != srcKey {
				return nil, fmt.Errorf("a tombstone (a record whose value is null) for table %s, whose key column %s comes from %s, not from the record's key: a tombstone deletes by the record's key", t.id, t.names[j], t.froms[j])
			}
		}
	}
	if r.Key == nil {
		return nil, errors.New("a tombstone (a record whose value is null) without a key: nothing to delete")
	}
	return m.rows(r, nil, nil, true)
}

func (t Table) id() string {
	if t.ID != "" {
		return t.ID
	}
	return t.Name
}

// validate checks a table's definition.
func (t Table) validate() error {
	if t.Name == "" {
		return fmt.Errorf("%w: a table has no name", sink.ErrConfig)
	}
	parts := strings.Split(t.Name, ".")
	if len(parts) > 2 || slices.Contains(parts, "") {
		return fmt.Errorf("%w: table %q: want table or schema.table", sink.ErrConfig, t.Name)
	}
	if len(t.Columns) == 0 {
		return fmt.Errorf("%w: table %s has no columns", sink.ErrConfig, t.id())
	}
	seen := map[string]bool{}
	for _, c := range t.Columns {
		if c.Name == "" {
			return fmt.Errorf("%w: table %s: a column has no name", sink.ErrConfig, t.id())
		}
		if seen[c.Name] {
			return fmt.Errorf("%w: table %s: column %s twice", sink.ErrConfig, t.id(), c.Name)
		}
		seen[c.Name] = true
	}
	if t.Upsert && len(t.Key) == 0 {
		return fmt.Errorf("%w: table %s: upsert needs its key columns (Key)", sink.ErrConfig, t.id())
	}
	keys := map[string]bool{}
	for _, k := range t.Key {
		if !seen[k] {
			return fmt.Errorf("%w: table %s: key column %s is not among its columns", sink.ErrConfig, t.id(), k)
		}
		if keys[k] {
			return fmt.Errorf("%w: table %s: key column %s twice", sink.ErrConfig, t.id(), k)
		}
		keys[k] = true
	}
	return nil
}
