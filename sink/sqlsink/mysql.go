package sqlsink

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	xamysql "github.com/xadb/xa/drivers/mysql"
	"github.com/xadb/xa/xa"
)

// mysqlDialect is MySQL 8 and MariaDB: rows go out as multi-row INSERT
// (ON DUPLICATE KEY UPDATE for an upsert) on the branch's session
// (drivers/mysql); the bookkeeping is kept on a database/sql pool of its
// own (myStore).
type mysqlDialect struct{}

func (mysqlDialect) compile(tb Table) statements {
	cols := make([]string, len(tb.Columns))
	for i, c := range tb.Columns {
		cols[i] = myIdent(c.Name)
	}
	parts := strings.Split(tb.Name, ".")
	for i := range parts {
		parts[i] = myIdent(parts[i])
	}
	st := statements{
		insert: "INSERT INTO " + strings.Join(parts, ".") + " (" + strings.Join(cols, ",") + ") VALUES ",
		row:    "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")",
		ident:  strings.Split(tb.Name, "."),
	}
	if tb.Upsert {
		var set []string
		for _, c := range tb.Columns {
			if !slices.Contains(tb.Key, c.Name) {
				set = append(set, myIdent(c.Name)+"=VALUES("+myIdent(c.Name)+")")
			}
		}
		if len(set) == 0 {
			k := myIdent(tb.Key[0])
			set = []string{k + "=" + k}
		}
		st.conflict = " ON DUPLICATE KEY UPDATE " + strings.Join(set, ",")
		keys := make([]string, len(tb.Key))
		for i, k := range tb.Key {
			keys[i] = myIdent(k)
		}
		st.del = "DELETE FROM " + strings.Join(parts, ".") + " WHERE " + keyList(keys) + " IN ("
	}
	return st
}

func (mysqlDialect) writer(b xa.Branch) (rowWriter, error) {
	c, ok := b.Session().(*xamysql.Conn)
	if !ok {
		return nil, fmt.Errorf("sink: a %s branch with a session of type %T", DriverMySQL, b.Session())
	}
	return &myWriter{c: c}, nil
}

func (mysqlDialect) open(ctx context.Context, c TargetConfig) (store, error) {
	return openMyStore(ctx, c)
}

func myIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// myWriter writes a branch's rows on its MySQL session. A statement of a
// shape (row count) sent a second time in the branch is prepared on the
// server and reused, so the server parses batches of one size once
// (flushes of full batches all have the same); the driver closes the
// statements with the branch.
type myWriter struct {
	c *xamysql.Conn

	mu sync.Mutex
	// stmts caches the statements prepared, by their text (two tables,
	// or an INSERT and an UPSERT of one table, never share one); seen
	// counts the texts sent as text so far.
	stmts map[string]*xamysql.Stmt
	seen  map[string]int
}

// write sends multi-row INSERTs, each below the target's BatchBytes and
// the placeholder limit. A statement refused for its data returns a
// *batchRefused: the server undid that statement alone, the earlier ones
// stay written.
func (w *myWriter) write(ctx context.Context, tb *table, rows [][]any) error {
	cols := len(tb.Columns)
	maxRows := max(1, maxPlaceholders/cols)
	done := 0
	for len(rows) > 0 {
		n, size := 0, len(tb.sql.insert)+len(tb.sql.conflict)
		for n < len(rows) && n < maxRows {
			s := rowSize(rows[n])
			if n > 0 && size+s > tb.t.cfg.BatchBytes {
				break
			}
			size += s
			n++
		}
		var sb strings.Builder
		sb.Grow(len(tb.sql.insert) + n*(len(tb.sql.row)+1) + len(tb.sql.conflict))
		sb.WriteString(tb.sql.insert)
		args := make([]any, 0, n*cols)
		for i := 0; i < n; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(tb.sql.row)
			args = append(args, rows[i]...)
		}
		sb.WriteString(tb.sql.conflict)
		st, err := w.statement(ctx, sb.String())
		if err == nil {
			if st != nil {
				_, err = st.ExecContext(ctx, args...)
			} else {
				_, err = w.c.ExecContext(ctx, sb.String(), args...)
			}
		}
		if err != nil {
			err = fmt.Errorf("sink: writing %d rows to %s on %s: %w", n, tb.Name, tb.Target, err)
			if r, ok := myRefusal(err, tb.Upsert); ok {
				return &batchRefused{done: done, n: n, refusal: r, err: err}
			}
			return err
		}
		rows, done = rows[n:], done+n
	}
	return nil
}

// guard does nothing: a statement refused in a MySQL/MariaDB branch undoes
// itself alone (docs/xa-facts.md, fact 21).
func (w *myWriter) guard(context.Context) error { return nil }

// undo does nothing (see guard).
func (w *myWriter) undo(context.Context) error { return nil }

// delete sends DELETE ... WHERE key IN (...), in chunks.
func (w *myWriter) delete(ctx context.Context, tb *table, keys [][]any) error {
	tuple := "?"
	if len(tb.Key) > 1 {
		tuple = "(" + strings.TrimSuffix(strings.Repeat("?,", len(tb.Key)), ",") + ")"
	}
	done := 0 // keys deleted by the earlier statements
	return deleteChunks(tb, keys, func(keys [][]any) error {
		var sb strings.Builder
		sb.WriteString(tb.sql.del)
		args := make([]any, 0, len(keys)*len(tb.Key))
		for i, k := range keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(tuple)
			args = append(args, k...)
		}
		sb.WriteByte(')')
		st, err := w.statement(ctx, sb.String())
		if err == nil {
			if st != nil {
				_, err = st.ExecContext(ctx, args...)
			} else {
				_, err = w.c.ExecContext(ctx, sb.String(), args...)
			}
		}
		if err != nil {
			err = fmt.Errorf("sink: deleting %d rows by key from %s on %s: %w", len(keys), tb.Name, tb.Target, err)
			if r, ok := myRefusal(err, tb.Upsert); ok {
				return &batchRefused{done: done, n: len(keys), refusal: r, err: err}
			}
			return err
		}
		done += len(keys)
		return nil
	})
}

// statement returns the branch's prepared statement of query, preparing
// it when the query comes a second time; nil: send this one as text.
func (w *myWriter) statement(ctx context.Context, query string) (*xamysql.Stmt, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.stmts[query]; st != nil {
		return st, nil
	}
	if w.seen == nil {
		w.seen, w.stmts = map[string]int{}, map[string]*xamysql.Stmt{}
	}
	if w.seen[query]++; w.seen[query] < 2 {
		return nil, nil
	}
	st, err := w.c.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	w.stmts[query] = st
	return st, nil
}
