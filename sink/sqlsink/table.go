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
	// dels marks the rows of rows that are deletes by key (Row.Delete),
	// by index; nil when there are none.
	dels map[int]bool
	// from are the rows' records, by index (nil for the dead letters').
	from []rowFrom
}

// add appends a row, or a delete by key (del, upsert tables only); for an
// upsert a row or a delete with the same key replaces the buffered one: a
// key's last event in source order wins, which is the key's state after
// all of them (an upsert writes every column), and one statement never
// touches a row twice. Keys are thus unique in the buffer, and the order
// in which flush sends its deletes and its upserts does not matter.
//
// o is the row's record; a row that replaces another record's row is
// marked merged (refusal.go).
func (b *buffer) add(t *table, vals []any, del bool, o *origin) {
	b.bytes += rowSize(vals)
	i := len(b.rows)
	if t.Upsert {
		k := keyOf(t.keyIdx, vals)
		j, ok := b.keys[k]
		if !ok {
			if b.keys == nil {
				b.keys = map[string]int{}
			}
			b.keys[k] = i
		} else {
			i = j
		}
	}
	if i == len(b.rows) {
		b.rows = append(b.rows, vals)
		b.from = append(b.from, rowFrom{o: o})
	} else {
		prev := b.from[i]
		b.rows[i] = vals
		b.from[i] = rowFrom{o: o, merged: prev.merged || prev.o != o}
	}
	switch {
	case del:
		if b.dels == nil {
			b.dels = map[int]bool{}
		}
		b.dels[i] = true
	case b.dels != nil:
		delete(b.dels, i)
	}
}

// split returns the buffered rows to upsert or insert, and the keys (the
// key columns' values, in Key's order) of the rows to delete.
func (b *buffer) split(t *table) (rows, keys [][]any) {
	if len(b.dels) == 0 {
		return b.rows, nil
	}
	for i, vals := range b.rows {
		if !b.dels[i] {
			rows = append(rows, vals)
			continue
		}
		k := make([]any, len(t.keyIdx))
		for j, c := range t.keyIdx {
			k[j] = vals[c]
		}
		keys = append(keys, k)
	}
	return rows, keys
}

// origins returns the origins of the rows (del: of the keys) split
// returns, in their order.
func (b *buffer) origins(del bool) []rowFrom {
	if len(b.dels) == 0 && !del {
		return b.from
	}
	var out []rowFrom
	for i, f := range b.from {
		if b.dels[i] == del {
			out = append(out, f)
		}
	}
	return out
}

// reset empties the buffer, keeping its capacity for the next rows.
func (b *buffer) reset() {
	clear(b.rows)
	clear(b.from)
	b.rows, b.from, b.bytes, b.keys, b.dels = b.rows[:0], b.from[:0], 0, nil, nil
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

// keyList is the left side of a delete's IN: the key column, or a row of
// them.
func keyList(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	return "(" + strings.Join(keys, ",") + ")"
}

// maxDeleteKeys bounds the keys of one DELETE statement.
const maxDeleteKeys = 1000

// deleteChunks calls f with the keys in chunks of at most maxDeleteKeys
// and the placeholder limit.
func deleteChunks(tb *table, keys [][]any, f func(keys [][]any) error) error {
	n := max(1, min(maxDeleteKeys, maxPlaceholders/len(tb.Key)))
	for len(keys) > 0 {
		k := min(n, len(keys))
		if err := f(keys[:k]); err != nil {
			return err
		}
		keys = keys[k:]
	}
	return nil
}
