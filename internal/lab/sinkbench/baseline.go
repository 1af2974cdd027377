package sinkbench

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/sqlsink"
)

// maxPlaceholders bounds the arguments of one prepared statement (MySQL
// refuses more than 65535).
const maxPlaceholders = 60000

// writer is one baseline writer: a session on each database it writes to.
type writer struct {
	s     *Setup
	mode  Mode
	my    *sql.Conn
	stmts map[int]*sql.Stmt // prepared multi-row INSERTs, by row count
	pg    *pgxpool.Conn
}

func (s *Setup) newWriter(ctx context.Context, t Target, m Mode) (*writer, error) {
	w := &writer{s: s, mode: m, stmts: map[int]*sql.Stmt{}}
	var err error
	if t != Postgres {
		if w.my, err = s.my.Conn(ctx); err != nil {
			return nil, err
		}
	}
	if t != MySQL {
		if w.pg, err = s.pg.Acquire(ctx); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

func (w *writer) close() {
	for _, st := range w.stmts {
		st.Close()
	}
	if w.my != nil {
		w.my.Close()
	}
	if w.pg != nil {
		w.pg.Release()
	}
}

// runWriters loads the records with a writer per partition: batches (or
// bulk loads) of records, each one transaction per database.
func (s *Setup) runWriters(ctx context.Context, t Target, m Mode, g gensource.Config) (int, time.Duration, error) {
	mapFn, err := sqlsink.JSONMapping(tables(t))
	if err != nil {
		return 0, 0, err
	}
	chunk := s.cfg.Batch
	if m == Ceiling {
		chunk = s.cfg.CeilingBatch
	}
	ws := make([]*writer, s.cfg.Partitions)
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.close()
			}
		}
	}()
	for i := range ws {
		if ws[i], err = s.newWriter(ctx, t, m); err != nil {
			return 0, 0, err
		}
	}
	var commits atomic.Int64
	start := time.Now()
	err = s.each(func(i int) error {
		w := ws[i]
		src := newSource(g, partitionsOf(g.Partitions, i, s.cfg.Partitions), s.cfg.Poll)
		for {
			recs := src.nextRecords(chunk)
			if len(recs) == 0 {
				return nil
			}
			var myRows, pgRows [][]any
			for _, r := range recs {
				rows, err := mapFn(r)
				if err != nil {
					return err
				}
				for _, row := range rows {
					if row.Table == myTable {
						myRows = append(myRows, row.Values)
					} else {
						pgRows = append(pgRows, row.Values)
					}
				}
			}
			if err := w.write(ctx, myRows, pgRows); err != nil {
				return err
			}
			commits.Add(int64(min(1, len(myRows)) + min(1, len(pgRows))))
		}
	})
	return int(commits.Load()), time.Since(start), err
}

// write writes one batch, each database's rows in one transaction, both
// databases in parallel.
func (w *writer) write(ctx context.Context, myRows, pgRows [][]any) error {
	var myErr error
	var wg sync.WaitGroup
	if len(myRows) > 0 {
		wg.Go(func() {
			if w.mode == Ceiling {
				myErr = w.loadMySQL(ctx, myRows)
			} else {
				myErr = w.insertMySQL(ctx, myRows)
			}
		})
	}
	var pgErr error
	if len(pgRows) > 0 {
		// COPY in autocommit: one transaction, rows streamed in binary.
		if _, err := w.pg.CopyFrom(ctx, pgIdent, columnNames(), pgx.CopyFromRows(pgRows)); err != nil {
			pgErr = fmt.Errorf("postgres: %w", err)
		}
	}
	wg.Wait()
	return errors.Join(myErr, pgErr)
}

// stmt returns the prepared INSERT of n rows.
func (w *writer) stmt(ctx context.Context, n int) (*sql.Stmt, error) {
	if st := w.stmts[n]; st != nil {
		return st, nil
	}
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", len(columns)), ",") + ")"
	q := "INSERT INTO " + table + " (" + strings.Join(columnNames(), ",") + ") VALUES " + strings.TrimSuffix(strings.Repeat(row+",", n), ",")
	st, err := w.my.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	w.stmts[n] = st
	return st, nil
}

// insertMySQL inserts rows with multi-row INSERTs prepared once per
// session: one statement in autocommit when the batch fits in one (one
// round trip), else the statements in one transaction.
func (w *writer) insertMySQL(ctx context.Context, rows [][]any) error {
	per := maxPlaceholders / len(columns)
	exec := func(ctx context.Context, rows [][]any, tx *sql.Tx) error {
		st, err := w.stmt(ctx, len(rows))
		if err != nil {
			return err
		}
		if tx != nil {
			st = tx.StmtContext(ctx, st)
		}
		args := make([]any, 0, len(rows)*len(columns))
		for _, r := range rows {
			args = append(args, r...)
		}
		_, err = st.ExecContext(ctx, args...)
		return err
	}
	if len(rows) <= per {
		if err := exec(ctx, rows, nil); err != nil {
			return fmt.Errorf("mysql: %w", err)
		}
		return nil
	}
	tx, err := w.my.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	for len(rows) > 0 {
		n := min(per, len(rows))
		if err := exec(ctx, rows[:n], tx); err != nil {
			return fmt.Errorf("mysql: %w", err)
		}
		rows = rows[n:]
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	return nil
}

// loadMySQL loads rows with LOAD DATA LOCAL INFILE, in autocommit: one
// transaction.
func (w *writer) loadMySQL(ctx context.Context, rows [][]any) error {
	var buf bytes.Buffer
	for _, r := range rows {
		for i, v := range r {
			if i > 0 {
				buf.WriteByte('\t')
			}
			if err := appendTSV(&buf, v); err != nil {
				return err
			}
		}
		buf.WriteByte('\n')
	}
	name := "sinkbench-" + strconv.FormatInt(w.s.seq.Add(1), 10)
	data := buf.Bytes()
	gomysql.RegisterReaderHandler(name, func() io.Reader { return bytes.NewReader(data) })
	defer gomysql.DeregisterReaderHandler(name)
	q := "LOAD DATA LOCAL INFILE 'Reader::" + name + "' INTO TABLE " + table +
		" CHARACTER SET utf8mb4 FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' (" + strings.Join(columnNames(), ",") + ")"
	if _, err := w.my.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	return nil
}

// appendTSV writes v as a LOAD DATA field (tab-separated, backslash
// escapes, \N for NULL).
func appendTSV(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString(`\N`)
	case int64:
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), x, 10))
	case float64:
		buf.Write(strconv.AppendFloat(buf.AvailableBuffer(), x, 'g', -1, 64))
	case bool:
		if x {
			buf.WriteByte('1')
		} else {
			buf.WriteByte('0')
		}
	case string:
		for i := 0; i < len(x); i++ {
			switch c := x[i]; c {
			case '\\':
				buf.WriteString(`\\`)
			case '\t':
				buf.WriteString(`\t`)
			case '\n':
				buf.WriteString(`\n`)
			case '\r':
				buf.WriteString(`\r`)
			case 0:
				buf.WriteString(`\0`)
			default:
				buf.WriteByte(c)
			}
		}
	default:
		return fmt.Errorf("sinkbench: cannot write a %T with LOAD DATA", v)
	}
	return nil
}
