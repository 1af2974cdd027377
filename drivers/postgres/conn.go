package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/xadb/xa/xa"
)

// Conn is the application's handle on a branch's session, returned by
// Branch.Session(): the statement methods of *pgx.Conn, without the means
// to begin or end a transaction.
//
// Every statement runs inside the branch's transaction. BEGIN is sent in
// the same round trip as the branch's first statement (for CopyFrom, and
// for a first statement with pgx options, in a round trip of its own).
//
// Statements are sent with the extended query protocol, one statement per
// string, never with the simple protocol (which runs "UPDATE ...; COMMIT"
// as two statements): a string holding several statements fails with
// 42601. Statements that would begin or end the transaction (BEGIN, START
// TRANSACTION, COMMIT, END, ROLLBACK, ABORT, PREPARE TRANSACTION, COMMIT
// PREPARED, ROLLBACK PREPARED) are refused before anything is sent with an
// error wrapping xa.ErrTransactionControl; ROLLBACK TO SAVEPOINT,
// SAVEPOINT and RELEASE are allowed. As a backstop, a statement after which
// the server reports no open transaction breaks the branch, which then
// votes abort.
//
// Statements without arguments are sent unnamed in one round trip.
// Statements with arguments use the pool's default_query_exec_mode (pgx's
// cache_statement unless the DSN says otherwise; simple_protocol is
// replaced by exec). A QueryExecMode or result-format option passed as
// first argument is honoured; on the branch's first statement it costs a
// round trip of its own for BEGIN.
//
// One statement at a time: a statement started while another one, or its
// Rows or BatchResults, is still open fails. Close every Rows and
// BatchResults. Once the branch has been prepared, committed or rolled
// back, statements fail with an error wrapping xa.ErrBranchDone.
//
// Session settings changed with SET (not SET LOCAL) outlive the branch on
// the pooled connection; use SET LOCAL. Run SET TRANSACTION as the
// branch's first statement to choose its isolation level.
type Conn struct {
	b *branch
}

// stmt is one statement in flight on a branch's session, from enter to
// exit.
type stmt struct {
	b      *branch
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool
	conn   *pgx.Conn
	begin  bool // BEGIN must be sent first
	exited bool
}

// enter claims the session for one statement, taking a connection from
// the pool for the branch's first one. The statement's context ends with
// ctx or with the branch's life.
func (b *branch) enter(ctx context.Context) (*stmt, error) {
	b.mu.Lock()
	switch {
	case b.state != stActive:
		b.mu.Unlock()
		return nil, b.err(opExec, xa.ErrBranchDone, errors.New("the branch has been prepared or ended; its session accepts no more statements"))
	case b.broken != nil:
		b.mu.Unlock()
		return nil, b.broken
	case b.running != nil:
		b.mu.Unlock()
		return nil, b.err(opExec, xa.ErrSessionBusy, errors.New("another statement is running, or its Rows or BatchResults are not closed; nothing was sent"))
	case b.life.Err() != nil:
		b.mu.Unlock()
		return nil, b.err(opExec, nil, fmt.Errorf("the branch's context is done: %w", context.Cause(b.life)))
	}
	running := make(chan struct{})
	b.running = running
	conn := b.conn
	b.mu.Unlock()

	sctx, cancel, stop := b.life, noCancel, noStop
	if ctx != b.start {
		// A context of its own: the statement ends with it or with the
		// branch's life. (Start's context, what xa.Tx gives its
		// callers, ends life itself: life alone bounds the statement,
		// without a context and a callback more per statement.)
		sctx, cancel = context.WithCancelCause(ctx)
		stop = context.AfterFunc(b.life, func() { cancel(context.Cause(b.life)) })
	}
	if conn == nil {
		c, err := b.rm.pool.Acquire(sctx)
		b.mu.Lock()
		if err == nil && b.state != stActive {
			// The branch ended while we waited for a connection.
			err = b.err(opExec, xa.ErrBranchDone, errors.New("the branch ended"))
			c.Release()
		} else if err == nil {
			b.conn = c
		}
		if err != nil {
			close(running)
			b.running = nil
			orphaned := b.orphaned
			b.mu.Unlock()
			stop()
			cancel(nil)
			if orphaned {
				b.rm.untrack(b)
			}
			return nil, b.err(opExec, nil, fmt.Errorf("no connection for the branch: %w", err))
		}
		conn = c
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.sent = true
	begun := b.begun
	b.mu.Unlock()
	return &stmt{b: b, ctx: sctx, cancel: cancel, stop: stop, conn: conn.Conn(), begin: !begun}, nil
}

func noCancel(error) {}
func noStop() bool   { return true }

// exit ends the statement: it learns the transaction's state from the
// session (open, failed, gone) and releases the session for the next
// statement. err is the statement's error, tag its command tag if known;
// exit returns the error to give the application.
func (s *stmt) exit(err error, tag *pgconn.CommandTag) error {
	if s.exited {
		return err
	}
	s.exited = true
	s.stop()
	s.cancel(nil)
	b := s.b
	pc := s.conn.PgConn()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil && tag != nil && writeTag(*tag) {
		b.wrote = true
	}
	var broke error
	switch {
	case pc.IsClosed():
		if b.broken == nil {
			cause := err
			if cause == nil {
				cause = errors.New("connection closed")
			}
			b.broken = &xa.Error{Op: opExec, RM: b.rm.name, XID: b.xid, Kind: xa.ErrRolledBack,
				Err: fmt.Errorf("session lost; the server rolls the transaction back: %w", cause)}
		}
	case pc.TxStatus() == 'T':
		b.begun = true
		b.failed = nil
	case pc.TxStatus() == 'E':
		b.begun = true
		if b.failed == nil {
			b.failed = err
			if b.failed == nil {
				b.failed = errors.New("a statement failed")
			}
		}
	case b.begun || (s.begin && err == nil):
		// The server reports no open transaction although BEGIN ran:
		// something ended it behind the transaction manager's back.
		b.broken = &xa.Error{Op: opExec, RM: b.rm.name, XID: b.xid, Kind: xa.ErrTransactionControl,
			Err: errors.New("the transaction is no longer open after the statement: the branch must abort")}
		broke = b.broken
	}
	close(b.running)
	b.running = nil
	if b.orphaned {
		conn := b.conn
		b.conn = nil
		if conn != nil {
			releaseConn(conn, true)
		}
		b.rm.untrack(b)
	}
	if broke != nil && err == nil {
		return broke
	}
	return err
}

// query is a statement after pgx options are taken out and a
// QueryRewriter applied.
type query struct {
	sql     string
	args    []any
	mode    pgx.QueryExecMode // 0: the connection's default
	formats []any             // QueryResultFormats, QueryResultFormatsByOID
}

// statement reads the pgx options in args (QueryExecMode, QueryRewriter,
// and for queries QueryResultFormats(ByOID)), applies the rewriter and
// refuses transaction control. Batched statements accept only
// QueryRewriter, as pgx batches do.
func (s *stmt) statement(sql string, args []any, batched bool) (query, error) {
	q := query{sql: sql, args: args}
	var rewriter pgx.QueryRewriter
loop:
	for len(q.args) > 0 {
		switch a := q.args[0].(type) {
		case pgx.QueryRewriter:
			rewriter = a
		case pgx.QueryExecMode:
			if batched {
				break loop
			}
			q.mode = a
			if a == pgx.QueryExecModeSimpleProtocol {
				q.mode = pgx.QueryExecModeExec
			}
		case pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			if batched {
				break loop
			}
			q.formats = append(q.formats, a)
		default:
			break loop
		}
		q.args = q.args[1:]
	}
	if rewriter != nil {
		var err error
		q.sql, q.args, err = rewriter.RewriteQuery(s.ctx, s.conn, q.sql, q.args)
		if err != nil {
			return q, fmt.Errorf("rewrite query failed: %w", err)
		}
	}
	if what, refused := transactionControl(q.sql); refused {
		return q, s.b.err(opExec, xa.ErrTransactionControl,
			fmt.Errorf("%s is reserved to the transaction manager", what))
	}
	return q, nil
}

// pgxArgs returns the arguments to hand to pgx: options first.
func (q query) pgxArgs() []any {
	out := make([]any, 0, len(q.args)+len(q.formats)+1)
	if q.mode != 0 {
		out = append(out, q.mode)
	}
	out = append(out, q.formats...)
	return append(out, q.args...)
}

// Exec runs one statement and returns its command tag.
func (c *Conn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	s, err := c.b.enter(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	q, err := s.statement(sql, args, false)
	if err != nil {
		return pgconn.CommandTag{}, s.exit(err, nil)
	}
	tag, err := s.exec(q)
	return tag, s.exit(err, &tag)
}

func (s *stmt) exec(q query) (pgconn.CommandTag, error) {
	if len(q.args) == 0 {
		// pgx would use the simple protocol here: send an unnamed
		// extended-protocol statement instead, with BEGIN in the same
		// round trip if needed.
		batch := &pgconn.Batch{}
		if s.begin {
			batch.ExecParams("BEGIN", nil, nil, nil, nil)
		}
		batch.ExecParams(q.sql, nil, nil, nil, nil)
		res, err := s.conn.PgConn().ExecBatch(s.ctx, batch).ReadAll()
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		if len(res) == 0 {
			return pgconn.CommandTag{}, nil
		}
		return res[len(res)-1].CommandTag, nil
	}
	if s.begin && q.mode == 0 {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(q.sql, q.args...)
		br := s.conn.SendBatch(s.ctx, b)
		_, err := br.Exec()
		var tag pgconn.CommandTag
		if err == nil {
			tag, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return tag, err
	}
	if s.begin {
		if _, err := s.conn.PgConn().ExecParams(s.ctx, "BEGIN", nil, nil, nil, nil).Close(); err != nil {
			return pgconn.CommandTag{}, err
		}
	}
	return s.conn.Exec(s.ctx, q.sql, q.pgxArgs()...)
}

// Query runs one statement and returns its rows, as pgx.Conn.Query does:
// errors are also reported by Rows.Err after Rows.Close. Close the Rows:
// the session is busy until then. Rows.Conn returns nil.
func (c *Conn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	s, err := c.b.enter(ctx)
	if err != nil {
		return &errRows{err: err}, err
	}
	q, err := s.statement(sql, args, false)
	if err != nil {
		err = s.exit(err, nil)
		return &errRows{err: err}, err
	}
	r := &sessionRows{s: s}
	if s.begin && len(q.formats) == 0 && q.mode == 0 {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(q.sql, q.args...)
		r.br = s.conn.SendBatch(s.ctx, b)
		if _, err := r.br.Exec(); err != nil {
			r.Rows = &errRows{err: err}
			r.Close()
			return r, r.Err()
		}
		r.Rows, err = r.br.Query()
	} else {
		if s.begin {
			if _, err := s.conn.PgConn().ExecParams(s.ctx, "BEGIN", nil, nil, nil, nil).Close(); err != nil {
				err = s.exit(err, nil)
				return &errRows{err: err}, err
			}
		}
		r.Rows, err = s.conn.Query(s.ctx, q.sql, q.pgxArgs()...)
	}
	if err != nil {
		r.Close()
		return r, r.Err()
	}
	return r, nil
}

// QueryRow runs a statement expected to return at most one row, as
// pgx.Conn.QueryRow does: Scan reports pgx.ErrNoRows when there is none.
func (c *Conn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, _ := c.Query(ctx, sql, args...)
	return &sessionRow{rows: rows}
}

// SendBatch sends the batch's statements in one pipeline (with BEGIN first
// if the branch has not begun), with the pool's default query exec mode.
// Each statement is checked as Exec checks it; if one is refused, nothing
// is sent and every result reports the error. Close the BatchResults: the
// session is busy until then.
func (c *Conn) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if len(b.QueuedQueries) == 0 {
		return &errBatch{closeOnly: true}
	}
	s, err := c.b.enter(ctx)
	if err != nil {
		return &errBatch{err: err}
	}
	nb := &pgx.Batch{}
	if s.begin {
		nb.Queue("BEGIN")
	}
	for _, qq := range b.QueuedQueries {
		q, err := s.statement(qq.SQL, qq.Arguments, true)
		if err != nil {
			return &errBatch{err: s.exit(err, nil)}
		}
		nq := nb.Queue(q.sql, q.args...)
		if fn := qq.Fn; fn != nil {
			nq.Fn = func(br pgx.BatchResults) error { return fn(&hiddenConnBatch{br}) }
		}
	}
	return &sessionBatch{s: s, br: s.conn.SendBatch(s.ctx, nb), skipBegin: s.begin}
}

// CopyFrom copies rows into a table with the COPY protocol, as
// pgx.Conn.CopyFrom does. As the branch's first statement it costs an
// extra round trip for BEGIN.
func (c *Conn) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	s, err := c.b.enter(ctx)
	if err != nil {
		return 0, err
	}
	if s.begin {
		if _, err := s.conn.PgConn().ExecParams(s.ctx, "BEGIN", nil, nil, nil, nil).Close(); err != nil {
			return 0, s.exit(err, nil)
		}
	}
	n, err := s.conn.CopyFrom(s.ctx, table, cols, src)
	tag := pgconn.NewCommandTag(fmt.Sprintf("COPY %d", n))
	return n, s.exit(err, &tag)
}

// sessionRows ends its statement when the rows are done.
type sessionRows struct {
	pgx.Rows
	s        *stmt
	br       pgx.BatchResults // the BEGIN batch, if any
	finished bool
	err      error // error of ending the statement, if Rows has none
}

func (r *sessionRows) Next() bool {
	if r.finished {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *sessionRows) Close() {
	if r.Rows != nil {
		r.Rows.Close()
	}
	r.finish()
}

func (r *sessionRows) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.Rows.Err()
}

// Conn returns nil: the pgx connection is the branch's, not the
// application's.
func (r *sessionRows) Conn() *pgx.Conn { return nil }

func (r *sessionRows) finish() {
	if r.finished {
		return
	}
	r.finished = true
	r.Rows.Close()
	err := r.Rows.Err()
	if r.br != nil {
		if cerr := r.br.Close(); err == nil {
			err = cerr
		}
	}
	tag := r.Rows.CommandTag()
	if xerr := r.s.exit(err, &tag); xerr != nil && r.Rows.Err() == nil {
		r.err = xerr
	}
}

// sessionRow is QueryRow's Row.
type sessionRow struct {
	rows pgx.Rows
}

func (r *sessionRow) Scan(dest ...any) error {
	rows := r.rows
	defer rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// sessionBatch ends its statement when the batch is closed, and hides the
// result of the BEGIN it sent first.
type sessionBatch struct {
	s         *stmt
	br        pgx.BatchResults
	skipBegin bool
	closed    bool
	err       error
}

func (sb *sessionBatch) begin() {
	if sb.skipBegin {
		sb.skipBegin = false
		_, _ = sb.br.Exec() // an error here is every later result's error too
	}
}

func (sb *sessionBatch) Exec() (pgconn.CommandTag, error) {
	if sb.closed {
		return pgconn.CommandTag{}, errBatchClosed
	}
	sb.begin()
	tag, err := sb.br.Exec()
	if err == nil && writeTag(tag) {
		sb.s.b.mu.Lock()
		sb.s.b.wrote = true
		sb.s.b.mu.Unlock()
	}
	return tag, err
}

func (sb *sessionBatch) Query() (pgx.Rows, error) {
	if sb.closed {
		return &errRows{err: errBatchClosed}, errBatchClosed
	}
	sb.begin()
	rows, err := sb.br.Query()
	return &hiddenConnRows{rows}, err
}

func (sb *sessionBatch) QueryRow() pgx.Row {
	if sb.closed {
		return &sessionRow{rows: &errRows{err: errBatchClosed}}
	}
	sb.begin()
	return sb.br.QueryRow()
}

func (sb *sessionBatch) Close() error {
	if sb.closed {
		return sb.err
	}
	sb.closed = true
	sb.begin()
	sb.err = sb.s.exit(sb.br.Close(), nil)
	return sb.err
}

var errBatchClosed = errors.New("postgres: batch already closed")

// hiddenConnBatch is what QueuedQuery callbacks see: the batch, with
// Rows.Conn hidden.
type hiddenConnBatch struct{ pgx.BatchResults }

func (h *hiddenConnBatch) Query() (pgx.Rows, error) {
	rows, err := h.BatchResults.Query()
	return &hiddenConnRows{rows}, err
}

type hiddenConnRows struct{ pgx.Rows }

func (*hiddenConnRows) Conn() *pgx.Conn { return nil }

// errBatch is the BatchResults of a batch that was not sent.
type errBatch struct {
	err       error
	closeOnly bool // an empty batch: only Close, which reports err
}

func (e *errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, e.result() }
func (e *errBatch) Query() (pgx.Rows, error)         { return &errRows{err: e.result()}, e.result() }
func (e *errBatch) QueryRow() pgx.Row                { return &sessionRow{rows: &errRows{err: e.result()}} }
func (e *errBatch) Close() error                     { return e.err }

func (e *errBatch) result() error {
	if e.closeOnly && e.err == nil {
		return errors.New("postgres: no result: the batch is empty")
	}
	return e.err
}

// errRows is the Rows of a statement that was not sent.
type errRows struct{ err error }

func (e *errRows) Close()                                       {}
func (e *errRows) Err() error                                   { return e.err }
func (e *errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (e *errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (e *errRows) Next() bool                                   { return false }
func (e *errRows) Scan(...any) error                            { return e.err }
func (e *errRows) Values() ([]any, error)                       { return nil, e.err }
func (e *errRows) RawValues() [][]byte                          { return nil }
func (e *errRows) Conn() *pgx.Conn                              { return nil }
func (e *errRows) TypeMap() *pgtype.Map                         { return nil }

// Tx returns nil: the branch's transaction belongs to the transaction
// manager.
func (sb *sessionBatch) Tx() pgx.Tx { return nil }

// Tx returns nil.
func (h *hiddenConnBatch) Tx() pgx.Tx { return nil }

// Tx returns nil.
func (e *errBatch) Tx() pgx.Tx { return nil }
