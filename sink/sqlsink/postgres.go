package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/xa"
)

// postgresDialect is PostgreSQL: rows go out as COPY (insert) or batched
// multi-row INSERT ... ON CONFLICT in one pipeline (upsert) on the
// branch's session (drivers/postgres); the bookkeeping is kept on a pgx
// pool of its own (pgStore).
type postgresDialect struct{}

// pgUpsertChunk is the row count of PostgreSQL's batched upserts;
// remainders go in power-of-two chunks so that few distinct statements
// are prepared.
const pgUpsertChunk = 256

func (postgresDialect) compile(tb Table) statements {
	cols := make([]string, len(tb.Columns))
	for i, c := range tb.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	ident := strings.Split(tb.Name, ".")
	st := statements{insert: "INSERT INTO " + pgx.Identifier(ident).Sanitize() + " (" + strings.Join(cols, ",") + ") VALUES ", ident: ident}
	if tb.Upsert {
		keys := make([]string, len(tb.Key))
		for i, k := range tb.Key {
			keys[i] = pgx.Identifier{k}.Sanitize()
		}
		var set []string
		for _, c := range tb.Columns {
			if !slices.Contains(tb.Key, c.Name) {
				id := pgx.Identifier{c.Name}.Sanitize()
				set = append(set, id+" = EXCLUDED."+id)
			}
		}
		st.del = "DELETE FROM " + pgx.Identifier(ident).Sanitize() + " WHERE " + keyList(keys) + " IN ("
		st.conflict = " ON CONFLICT (" + strings.Join(keys, ",") + ") DO NOTHING"
		if len(set) > 0 {
			st.conflict = " ON CONFLICT (" + strings.Join(keys, ",") + ") DO UPDATE SET " + strings.Join(set, ", ")
		}
	}
	return st
}

func (postgresDialect) writer(b xa.Branch) (rowWriter, error) {
	c, ok := b.Session().(*xapg.Conn)
	if !ok {
		return nil, fmt.Errorf("sink: a %s branch with a session of type %T", DriverPostgres, b.Session())
	}
	return &pgWriter{c: c}, nil
}

func (postgresDialect) open(ctx context.Context, c TargetConfig) (store, error) {
	return openPgStore(ctx, c)
}

// pgWriter writes a branch's rows on its PostgreSQL session.
type pgWriter struct {
	c *xapg.Conn
	// armed: the savepoint pgSavepoint is set and nothing was written
	// since (guard need not set it again).
	armed bool
}

// pgSavepoint is the savepoint a refused write rolls back to.
const pgSavepoint = "xa_sink_rows"

// guard sets the savepoint that undo rolls back to: a refused statement
// fails a PostgreSQL transaction, and only a rollback to a savepoint set
// before it lets the branch go on. It costs a round trip per write, and a
// subtransaction per write that the transaction keeps until it ends.
func (w *pgWriter) guard(ctx context.Context) error {
	if w.armed {
		return nil
	}
	if _, err := w.c.Exec(ctx, "SAVEPOINT "+pgSavepoint); err != nil {
		return fmt.Errorf("sink: setting a savepoint: %w", err)
	}
	w.armed = true
	return nil
}

// undo rolls back to the savepoint of the last guard: the refused write is
// undone, the branch goes on, the savepoint stays set.
func (w *pgWriter) undo(ctx context.Context) error {
	if _, err := w.c.Exec(ctx, "ROLLBACK TO SAVEPOINT "+pgSavepoint); err != nil {
		return err
	}
	w.armed = true
	return nil
}

// write copies rows (insert) or sends batched multi-row INSERT ... ON
// CONFLICT statements in one pipeline (upsert). A write refused for its
// data returns a *batchRefused of all its rows: the transaction has
// failed, and undo (back to the savepoint of guard) undoes all of it.
func (w *pgWriter) write(ctx context.Context, tb *table, rows [][]any) (err error) {
	w.armed = false
	all := rows // the loop below consumes rows
	defer func() {
		var row []any
		if len(all) == 1 {
			row = all[0]
		}
		if r, ok := pgRefusal(err, tb, row); ok {
			err = &batchRefused{n: len(all), refusal: r, err: err}
		}
	}()
	if !tb.Upsert {
		if _, err := w.c.CopyFrom(ctx, pgx.Identifier(tb.sql.ident), tb.columnNames(), pgx.CopyFromRows(rows)); err != nil {
			if ee := copyEncodeError(err, tb); ee != nil {
				return fmt.Errorf("sink: copying %d rows to %s on %s: %w", len(rows), tb.Name, tb.Target, ee)
			}
			return fmt.Errorf("sink: copying %d rows to %s on %s: %w", len(rows), tb.Name, tb.Target, err)
		}
		return nil
	}
	cols := len(tb.Columns)
	chunk := max(1, min(pgUpsertChunk, maxPlaceholders/cols))
	batch := &pgx.Batch{}
	for len(rows) > 0 {
		n := chunk
		for n > len(rows) {
			n /= 2
		}
		var sb strings.Builder
		sb.WriteString(tb.sql.insert)
		args := make([]any, 0, n*cols)
		for i := 0; i < n; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteByte('(')
			for j := 0; j < cols; j++ {
				if j > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, "$%d", i*cols+j+1)
			}
			sb.WriteByte(')')
			args = append(args, rows[i]...)
		}
		sb.WriteString(tb.sql.conflict)
		batch.Queue(sb.String(), args...)
		rows = rows[n:]
	}
	br := w.c.SendBatch(ctx, batch)
	for i := 0; i < batch.Len() && err == nil; i++ {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sink: upserting rows to %s on %s: %w", tb.Name, tb.Target, err)
	}
	return nil
}

// delete sends DELETE ... WHERE key IN (...) statements, in chunks, in
// one pipeline.
func (w *pgWriter) delete(ctx context.Context, tb *table, keys [][]any) error {
	batch := &pgx.Batch{}
	_ = deleteChunks(tb, keys, func(keys [][]any) error {
		var sb strings.Builder
		sb.WriteString(tb.sql.del)
		args := make([]any, 0, len(keys)*len(tb.Key))
		for i, k := range keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			if len(k) > 1 {
				sb.WriteByte('(')
			}
			for j := range k {
				if j > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, "$%d", len(args)+j+1)
			}
			if len(k) > 1 {
				sb.WriteByte(')')
			}
			args = append(args, k...)
		}
		sb.WriteByte(')')
		batch.Queue(sb.String(), args...)
		return nil
	})
	w.armed = false
	br := w.c.SendBatch(ctx, batch)
	var err error
	for i := 0; i < batch.Len() && err == nil; i++ {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		err = fmt.Errorf("sink: deleting %d rows by key from %s on %s: %w", len(keys), tb.Name, tb.Target, err)
		if r, ok := pgRefusal(err, tb, nil); ok {
			// The pipeline failed the transaction: undo undoes all of it.
			return &batchRefused{n: len(keys), refusal: r, err: err}
		}
		return err
	}
	return nil
}

// EncodeError is a value the PostgreSQL client (pgx) could not encode for
// its column's type: the server never saw it. (pgx ends a COPY whose rows
// it cannot encode with CopyFail, which the server answers with SQLSTATE
// 57014, "query canceled": that code would read as a cancellation.)
type EncodeError struct {
	Table  string
	Target string
	// Reason is pgx's message.
	Reason string
}

func (e *EncodeError) Error() string {
	return fmt.Sprintf("a value cannot be encoded for its column of %s on %s (by the client, not refused by the server): %s", e.Table, e.Target, e.Reason)
}

// copyFailed starts the server's message for a COPY the client ended with
// CopyFail; the client's reason follows.
const copyFailed = "COPY from stdin failed: "

// copyEncodeError returns the *EncodeError that err, a failed COPY, hides
// as SQLSTATE 57014, or nil.
func copyEncodeError(err error, tb *table) *EncodeError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "57014" && strings.HasPrefix(pe.Message, copyFailed) {
		return &EncodeError{Table: tb.Name, Target: tb.Target, Reason: strings.TrimPrefix(pe.Message, copyFailed)}
	}
	return nil
}
