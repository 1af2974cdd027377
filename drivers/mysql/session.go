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
	g      guard // armed while a statement runs (see watch)

	// For a branch's session: the branch's work context and its parent,
	// Start's context (see watch).
	work, start context.Context
}

// newSession takes a connection from the pool and pins it.
func (rm *RM) newSession(ctx context.Context) (*session, error) {
	conn, err := rm.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	s := &session{rm: rm, conn: conn}
	s.g.s = s
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
	s.g.unwatch()
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
	s.g.unwatch()
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

// guard cancels the statement running on a session when one of its two
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
//
// There is one guard per session, armed for each statement (watch) and
// disarmed when it returns (stop). It watches a context with a standing
// callback (context.AfterFunc) that it keeps from one statement to the
// next while the statement's contexts stay the same ones (a branch's work
// context; the caller's, when one context bounds several statements), and
// drops when the session is released: the callbacks, not the statements,
// cost the allocations. A callback that runs while no statement is armed,
// or for a context the armed statement does not watch, does nothing: the
// next statement with that context is refused before it is sent (ready,
// exec), or, if it got past that check, killed when armed (watch).
type guard struct {
	s     *session
	slots [2]watchSlot // standing callbacks: [0] for a, [1] for b

	mu        sync.Mutex
	armed     bool            // a statement runs: the callbacks may kill it
	a, b      context.Context // the armed statement's contexts (b may be nil)
	fired     bool            // a context ended while armed: a kill was started
	delivered chan struct{}   // closed when that kill has been delivered (or failed)
	cause     error
	dropped   bool               // KILL QUERY failed: the connection was closed instead
	cancelDrv context.CancelFunc // nil when the socket is closed instead

	// A callback on the session's start context, made when the work
	// context ended before it (Rollback, Close): from then on a command
	// under the start context is no longer covered through work's
	// callback (see fire).
	stopStart func() bool
	released  bool // unwatch ran: no callback is made any more
}

// watchSlot is a standing callback on one context.
type watchSlot struct {
	ctx  context.Context
	drv  context.Context // context.WithoutCancel(ctx), for slot 0
	stop func() bool     // nil when ctx never ends
}

// set makes the slot watch ctx, keeping what it has if ctx is the context
// it watches already. With callback false it only holds ctx (for drv):
// another slot's callback covers it.
func (w *watchSlot) set(g *guard, ctx context.Context, callback bool) {
	if w.ctx == ctx {
		return
	}
	w.clear()
	w.ctx = ctx
	if callback && ctx.Done() != nil {
		w.stop = context.AfterFunc(ctx, func() { g.fire(ctx) })
	}
}

func (w *watchSlot) clear() {
	if w.stop != nil {
		w.stop()
	}
	*w = watchSlot{}
}

// watch arms the session's guard for a and b (b may be nil) and returns
// the context to hand to the driver: a's values (a traced statement's
// span, for a Config.Connector wrapper), none of its cancellation.
//
// On a branch's session, a statement bounded by Start's context (what
// xa.Tx gives its callers) is watched through the callback on the
// branch's work context, which that context ends (see fire), rather than
// through a callback of its own.
func (s *session) watch(a, b context.Context) (context.Context, *guard) {
	g := &s.g
	if !comparableCtx(a) {
		// Identified by the guard with ==, which would panic.
		a = &boxedCtx{a}
	}
	viaWork := s.work != nil && a == s.start
	g.slots[0].set(g, a, !viaWork)
	if g.slots[0].drv == nil {
		g.slots[0].drv = context.WithoutCancel(a)
	}
	drv := g.slots[0].drv
	if b != nil || viaWork {
		w := b
		if w == nil {
			w = s.work
		}
		g.slots[1].set(g, w, true)
	}
	var cancelDrv context.CancelFunc
	if s.dc.sock == nil {
		drv, cancelDrv = context.WithCancel(drv)
	}
	g.mu.Lock()
	g.armed, g.a, g.b = true, a, b
	g.fired, g.delivered, g.cause, g.dropped, g.cancelDrv = false, nil, nil, false, cancelDrv
	g.mu.Unlock()
	// A context that ended before it was armed was not acted on by its
	// callback (or will be, as it finds the guard armed now).
	if a.Err() != nil {
		go g.fire(a)
	} else if b != nil && b.Err() != nil {
		go g.fire(b)
	}
	return drv, g
}

// unwatch drops the guard's standing callbacks: the session is released.
// No statement is armed.
func (g *guard) unwatch() {
	g.slots[0].clear()
	g.slots[1].clear()
	g.mu.Lock()
	g.released = true
	stop := g.stopStart
	g.stopStart = nil
	g.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// comparableCtx reports whether ctx can be compared with ==: a context
// type of the application's may be a struct holding a slice or a map, for
// which == panics. If ctx == ctx does not panic, neither does ctx == x for
// any x.
func comparableCtx(ctx context.Context) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return ctx == ctx
}

// boxedCtx gives a context that cannot be compared an identity: a pointer.
type boxedCtx struct{ context.Context }

// fire kills the armed statement because ctx ended, if ctx is one of its
// contexts and no kill was started for it yet. The branch's work context
// ending also stands for Start's context when that has ended (it ends
// work, its child, before work's callbacks run); when work ends while
// Start's context has not (Rollback, Close), Start's context gets a
// callback of its own, since the commands Rollback then sends under it
// are no longer covered through work's.
func (g *guard) fire(ctx context.Context) {
	g.mu.Lock()
	if start := g.s.start; ctx == g.s.work && start != nil {
		if start.Err() == nil {
			// Work ended on its own (Rollback, Close): a command under
			// Start's context, which work's callback covered, needs a
			// callback of its own from now on.
			if g.stopStart == nil && !g.released && start.Done() != nil {
				g.stopStart = context.AfterFunc(start, func() { g.fire(start) })
			}
		} else if ctx != g.b && g.a == start {
			ctx = start
		}
	}
	if !g.armed || g.fired || (ctx != g.a && ctx != g.b) {
		g.mu.Unlock()
		return
	}
	g.fired = true
	g.cause = ctxError(ctx)
	delivered := make(chan struct{})
	g.delivered = delivered
	cancelDrv := g.cancelDrv
	g.mu.Unlock()
	if err := g.s.rm.killQuery(g.s.id); err != nil {
		g.s.rm.log.Warn("mysql: KILL QUERY failed; closing the connection instead", "session", g.s.id, "err", err)
		g.mu.Lock()
		if cancelDrv != nil {
			g.dropped = true
			cancelDrv() // go-sql-driver closes the connection, if the statement still runs
		} else if g.armed {
			// Only while the statement runs: a connection whose
			// statement returned is not broken behind its back.
			g.dropped = true
			g.s.dc.sock.Close() //nolint:errcheck // the statement's error says the rest
		}
		g.mu.Unlock()
	}
	close(delivered)
}

// stop disarms the guard. If it fired, stop waits until the kill has been
// delivered, so that a late KILL QUERY cannot hit a later statement, and
// returns the context's error.
func (g *guard) stop() error {
	g.mu.Lock()
	g.armed = false
	fired, delivered := g.fired, g.delivered
	g.a, g.b = nil, nil
	g.mu.Unlock()
	if !fired {
		return nil
	}
	<-delivered
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
