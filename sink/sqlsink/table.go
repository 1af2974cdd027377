package sqlsink

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// table is a Table compiled for its target's dialect.
type table struct {
	Table
	t      *target
	keyIdx []int
	// kinds are the kinds of Columns in the target's catalogue, recorded
	// by the table check that every instance runs first (nil before).
	kinds atomic.Pointer[[]colKind]
	// sql are its statements in the target's dialect.
	sql statements
}

func compileTable(tb Table, t *target) *table {
	ct := &table{Table: tb, t: t, sql: t.d.compile(tb)}
	for _, k := range tb.Key {
		for i, c := range tb.Columns {
			if c.Name == k {
				ct.keyIdx = append(ct.keyIdx, i)
			}
		}
	}
	return ct
}

// buffer holds a table's rows not yet sent.
type buffer struct {
	rows  [][]any
	bytes int
	keys  map[string]int // upsert: key -> index in rows (the last row wins)
}

// add appends a row; for an upsert a row with the same key replaces the
// buffered one (so that one statement never touches a row twice).
func (b *buffer) add(t *table, vals []any) {
	b.bytes += rowSize(vals)
	if t.Upsert {
		k := keyOf(t.keyIdx, vals)
		if i, ok := b.keys[k]; ok {
			b.rows[i] = vals
			return
		}
		if b.keys == nil {
			b.keys = map[string]int{}
		}
		b.keys[k] = len(b.rows)
	}
	b.rows = append(b.rows, vals)
}

// reset empties the buffer, keeping its capacity for the next rows.
func (b *buffer) reset() {
	clear(b.rows)
	b.rows, b.bytes, b.keys = b.rows[:0], 0, nil
}

func (b *buffer) full(t *table) bool {
	return b.bytes >= t.t.cfg.BatchBytes || len(b.rows) >= t.t.cfg.BatchRows
}

// keyOf renders the key columns of a row, whatever their Go types (a
// string "1" and an int64 1 land in the same column as the same key).
func keyOf(idx []int, vals []any) string {
	var sb strings.Builder
	for _, i := range idx {
		fmt.Fprint(&sb, vals[i])
		sb.WriteByte(0)
	}
	return sb.String()
}

// rowSize estimates a row's size in a statement.
func rowSize(vals []any) int {
	n := 3
	for _, v := range vals {
		switch x := v.(type) {
		case string:
			n += len(x) + 3
		case []byte:
			n += 2*len(x) + 4
		case nil:
			n += 5
		case time.Time:
			n += 30
		default:
			n += 22
		}
	}
	return n
}

func (t *table) columnNames() []string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	return names
}
