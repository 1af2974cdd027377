package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// session is one pooled connection pinned for a while: to a branch from
// Start until the branch ends, or to one RM-level command.
type session struct {
	rm     *RM
	conn   *sql.Conn
	dc     *drvConn // reached once through conn.Raw; only its own fields are used outside Raw
	id     uint64   // CONNECTION_ID()
	server serverInfo
}

// newSession takes a connection from the pool and pins it.
func (rm *RM) newSession(ctx context.Context) (*session, error) {
	conn, err := rm.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	s := &session{rm: rm, conn: conn}
	err = conn.Raw(func(dc any) error {
		w, ok := dc.(*drvConn)
		if !ok {
			return fmt.Errorf("mysql: pool connection is %T, not made by this package", dc)
		}
		s.dc, s.id, s.server = w, w.id, w.server
		return nil
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

// release ends the pin. A clean session (no XA branch can be attached, no
// session state the next user would trip over) goes back to the pool; any
// other is closed and never reused, so that the server detaches a prepared
// branch or rolls back an active one.
func (s *session) release(clean bool) {
	if clean {
		if s.dc.xa.Load() {
			s.dc.cleanAt.Store(s.dc.clock.low(s.rm.now()).UnixNano())
			s.dc.xa.Store(false)
		}
		s.conn.Close()
		return
	}
	s.discard()
}

// discard closes the session's connection instead of pooling it. Returning
// driver.ErrBadConn from Raw makes database/sql close the driver connection
// (database/sql.(*DB).putConn), and the xa flag makes sure no code path can
// pool it again.
func (s *session) discard() {
	s.dc.xa.Store(true)
	_ = s.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = s.conn.Close() // sql.ErrConnDone: already closed by the line above
	s.rm.log.Debug("mysql: session discarded", "session", s.id)
}

// exec runs an internal statement (XA commands) on the session while
// watching ctx: when ctx ends the statement is cancelled on the server and
// exec returns a *cancelledError once the server has answered.
func (s *session) exec(ctx context.Context, query string) error {
	if err := ctx.Err(); err != nil {
		return &cancelledError{ctxErr: ctxError(ctx)}
	}
	drv, g := s.watch(ctx, nil)
	_, err := s.conn.ExecContext(drv, query)
	return g.result(err)
}

// execTimed runs query, statements that return no rows, followed by
// SELECT @@timestamp in the same round trip, while watching ctx as exec
// does. On success it returns the server's clock when query had completed.
func (s *session) execTimed(ctx context.Context, query string) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, &cancelledError{ctxErr: ctxError(ctx)}
	}
	drv, g := s.watch(ctx, nil)
	var ts sql.NullFloat64
	err := func() error {
		rows, err := s.conn.QueryContext(drv, query+"; SELECT @@timestamp")
		if err != nil {
			return err
		}
		defer rows.Close()
		for {
			for rows.Next() {
				if err := rows.Scan(&ts); err != nil {
					return err
				}
			}
			if !rows.NextResultSet() {
				break
			}
		}
		return rows.Err()
	}()
	if err = g.result(err); err != nil {
		return time.Time{}, err
	}
	if !ts.Valid {
		return time.Time{}, fmt.Errorf("mysql: SELECT @@timestamp after %.40q returned nothing", query)
	}
	sec := math.Floor(ts.Float64)
	return time.Unix(int64(sec), int64(math.Round((ts.Float64-sec)*1e6))*1e3), nil
}

// interrupted reports whether err is the server's answer to a statement
// interrupted by KILL QUERY (rather than an answer of its own that
// happened to cross the kill).
func interrupted(err error) bool {
	switch errNumber(err) {
	case erQueryInterrupted, erSortAborted:
		return true
	}
	return false
}

// guard cancels the statement running on a session when one of two
// contexts ends, with KILL QUERY sent from the RM's side pool: the server
// interrupts the statement and answers it with an error, and the session
// (with the branch on it) survives. go-sql-driver never sees the caller's
// context (it would close the connection). If KILL QUERY cannot be
// delivered, the guard closes the connection as a last resort: its socket
// (drvConn.sock), so that the statement fails at once, or, for a
// connection whose socket is not known, through a context of the guard's
// own handed to go-sql-driver, which closes the connection when it is
// cancelled. Either way the statement's reply is lost, whatever the server
// did with it (see result).
//
// A context go-sql-driver cannot see end costs nothing per statement; one
// it can makes it hand the context to a goroutine of the connection's and
// back (and database/sql start a goroutine per Rows), which is why the
// socket is the last resort when it is known.
type guard struct {
	s         *session
	once      sync.Once
	fired     chan struct{} // closed when the kill has been delivered (or failed)
	cause     error
	dropped   bool // KILL QUERY failed: the connection was closed instead
	stopA     func() bool
	stopB     func() bool
	cancelDrv context.CancelFunc // nil when the socket is closed instead

	mu   sync.Mutex
	over bool // the statement returned: its socket is not closed any more
}

// watch arms a guard for a and b (b may be nil) and returns the context
// to hand to the driver: a's values (a traced statement's span, for a
// Config.Connector wrapper), none of its cancellation.
func (s *session) watch(a, b context.Context) (context.Context, *guard) {
	g := &guard{s: s, fired: make(chan struct{})}
	drv := context.WithoutCancel(a)
	if s.dc.sock == nil {
		drv, g.cancelDrv = context.WithCancel(drv)
	}
	g.stopA = context.AfterFunc(a, func() { g.kill(a) })
	if b != nil {
		g.stopB = context.AfterFunc(b, func() { g.kill(b) })
	}
	return drv, g
}

func (g *guard) kill(ctx context.Context) {
	g.once.Do(func() {
		g.cause = ctxError(ctx)
		if err := g.s.rm.killQuery(g.s.id); err != nil {
			g.s.rm.log.Warn("mysql: KILL QUERY failed; closing the connection instead", "session", g.s.id, "err", err)
			if g.cancelDrv != nil {
				g.dropped = true
				g.cancelDrv() // go-sql-driver closes the connection, if the statement still runs
			} else {
				// Only while the statement runs: a connection whose
				// statement returned is not broken behind its back.
				g.mu.Lock()
				if !g.over {
					g.dropped = true
					g.s.dc.sock.Close() //nolint:errcheck // the statement's error says the rest
				}
				g.mu.Unlock()
			}
		}
		close(g.fired)
	})
}

// stop disarms the guard. If it fired, stop waits until the kill has been
// delivered, so that a late KILL QUERY cannot hit a later statement, and
// returns the context's error.
func (g *guard) stop() error {
	g.mu.Lock()
	g.over = true
	g.mu.Unlock()
	a := g.stopA()
	b := true
	if g.stopB != nil {
		b = g.stopB()
	}
	if a && b {
		return nil
	}
	<-g.fired
	return g.cause
}

// result disarms the guard and returns the error to report for a statement
// that returned err: a *cancelledError when the guard's context ended and
// the server answered that it interrupted the statement; a *droppedError,
// which connectionLost recognises, when the guard had to close the
// connection (the server may have run the statement, and the session may
// still be running it); err otherwise.
func (g *guard) result(err error) error {
	err, cause := g.finish(err)
	if cause != nil && interrupted(err) {
		return &cancelledError{ctxErr: cause, serverErr: err}
	}
	return err
}

// finish disarms the guard (see stop) and returns err, turned into a
// *droppedError when the guard closed the connection, and the cause of the
// context that ended, if any.
func (g *guard) finish(err error) (error, error) {
	cause := g.stop()
	if err != nil && cause != nil && g.dropped {
		err = &droppedError{ctxErr: cause, err: err}
	}
	return err, cause
}

// droppedError is what a statement returns when its context ended, KILL
// QUERY could not be delivered and the connection was closed under it: the
// reply is lost. It matches the context's error and driver.ErrBadConn.
type droppedError struct {
	ctxErr error
	err    error
}

func (e *droppedError) Error() string {
	return fmt.Sprintf("%v: KILL QUERY could not be sent, so the connection was closed and the reply is lost (%v)", e.ctxErr, e.err)
}

func (e *droppedError) Unwrap() []error { return []error{e.ctxErr, driver.ErrBadConn, e.err} }

// killQuery interrupts the statement running on session id. A session that
// is gone (1094) is not an error.
func (rm *RM) killQuery(id uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	_, err := rm.side.ExecContext(ctx, "KILL QUERY "+strconv.FormatUint(id, 10))
	if errNumber(err) == erUnknownThreadID {
		err = nil
	}
	rm.log.Debug("mysql: KILL QUERY", "session", id, "err", err)
	return err
}

// killTimeout bounds one KILL QUERY on the side pool.
const killTimeout = 5 * time.Second
