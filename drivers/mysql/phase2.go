package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/xadb/xa/xa"
)

// sharedReadings holds one *trxReadings per server address and user.
var sharedReadings sync.Map

// Commit commits the prepared branch xid from a pooled session (phase 2
// elsewhere, recovery).
//
// MariaDB keeps a prepared branch attached to the session that prepared
// it, and committing from another session while that one is still closing
// can answer 1397 while the branch is still listed, or even answer success
// without committing (docs/xa-facts.md, fact 7). So, when from.Session is set
// and the server has not restarted since from.Prepared, Commit returns
// ErrRetryable while that connection id is still in the process list, and
// then until InnoDB shows no transaction of that session. Both need the
// PROCESS privilege to see other users' sessions and INNODB_TRX: without
// it Commit returns ErrRetryable, saying so, until the server restarts
// (the branch stays pending; Check reports the missing privilege).
// from.Prepared is on the server's clock (see Branch.Origin), and so is the
// server start time it is compared with: the clocks of the coordinator's
// and the caller's hosts take no part. A
// 1397 answer is checked against XA RECOVER: still listed means still
// attached somewhere (ErrRetryable); not listed gives ErrUnknownXID
// (committed already, or never prepared: only the decision log knows).
// XA_RB* answers give ErrRolledBack: MariaDB answers 1402 to XA COMMIT of
// a detached branch that wrote nothing.
//
// MariaDB 10.11 matches a detached branch by gtrid and bqual only: XA
// COMMIT with the wrong formatID commits it. So when XA RECOVER lists a
// branch that differs from xid only in its formatID, and not xid itself,
// Commit sends nothing and returns ErrUnknownXID (Rollback: nil).
//
// Commit costs two round trips, the check (process list and XA RECOVER)
// and XA COMMIT, plus, when the preparing session has left the process
// list, a reading of INNODB_TRX shared with concurrent callers (see
// precheck).
func (rm *RM) Commit(ctx context.Context, xid xa.XID, from xa.Origin) error {
	return rm.finish(ctx, opCommit, xid, from)
}

// Rollback rolls back the prepared branch xid from a pooled session, with
// the same wait for the preparing session as Commit (and the same
// ErrRetryable without the PROCESS privilege). A branch the server
// does not know and XA RECOVER does not list is gone: nil. So is one the
// server reports rolled back (XA_RB*).
func (rm *RM) Rollback(ctx context.Context, xid xa.XID, from xa.Origin) error {
	return rm.finish(ctx, opRollback, xid, from)
}

func (rm *RM) finish(ctx context.Context, op string, xid xa.XID, from xa.Origin) (err error) {
	if err := xid.Validate(); err != nil {
		return rm.rmError(op, xid, xa.ErrInvalidXID, err)
	}
	s, err := rm.newSession(ctx)
	if err != nil {
		// Nothing was sent.
		return rm.rmError(op, xid, xa.ErrRetryable, err)
	}
	clean := true
	defer func() { s.release(clean) }()
	pc, err := rm.precheck(ctx, s, xid, from)
	if err != nil {
		clean = false
		return rm.rmError(op, xid, xa.ErrRetryable, fmt.Errorf("checking before %s: %w", op, err))
	}
	if pc.alive != nil {
		return rm.rmError(op, xid, xa.ErrRetryable, pc.alive)
	}
	if !pc.listed && pc.twin != nil {
		// MariaDB matches a detached branch without its formatID: XA
		// COMMIT of our XID would finish this other branch.
		if op == opRollback {
			return nil
		}
		return rm.rmError(op, xid, xa.ErrUnknownXID, fmt.Errorf("not listed; only %s is, which differs in formatID and which the server would take for it: not sent", pc.twin.Raw))
	}
	verb := "XA COMMIT "
	if op == opRollback {
		verb = "XA ROLLBACK "
	}
	err = s.exec(ctx, verb+xidLiteral(xid))
	var ce *cancelledError
	switch {
	case err == nil:
		return nil
	case connectionLost(err):
		clean = false
		return rm.rmError(op, xid, xa.ErrOutcomeUnknown, err)
	case errors.As(err, &ce):
		return rm.rmError(op, xid, xa.ErrRetryable, err)
	}
	switch errNumber(err) {
	case erXAERNota:
		// Listed before the command, or now: attached to a session, or
		// being detached from one (fact 7).
		listed := pc.listed
		if !listed {
			ps, lerr := recoverOn(ctx, s.conn)
			if lerr != nil {
				return rm.rmError(op, xid, xa.ErrRetryable, fmt.Errorf("%w; then XA RECOVER failed: %w", err, lerr))
			}
			listed = listedIn(ps, xid)
		}
		switch {
		case listed:
			return rm.rmError(op, xid, xa.ErrRetryable, fmt.Errorf("%w, but XA RECOVER lists the branch: still attached to another session", err))
		case op == opRollback:
			return nil
		}
		return rm.rmError(op, xid, xa.ErrUnknownXID, err)
	case erXARBRollback, erXARBTimeout, erXARBDeadlock:
		if op == opRollback {
			return nil
		}
		if errNumber(err) == erXARBRollback && s.server.mariaDB {
			// MariaDB answers 1402 to XA COMMIT of a detached prepared
			// branch that wrote nothing (InnoDB holds no transaction for
			// it): committing and rolling back it are the same, nothing.
			// It is not a heuristic rollback, which MariaDB never takes
			// (TestDetachedReadOnlyBranch).
			return nil
		}
		return rm.rmError(op, xid, xa.ErrRolledBack, err)
	case erXAERRMFail, erXAEROutside:
		// The pooled session is in a state it should not be in.
		clean = false
	}
	return rm.wrap(op, xid, err)
}

// precheckResult is what the server says before phase 2 by XID.
type precheckResult struct {
	alive  error              // non-nil: the preparing session may still hold the branch (why)
	listed bool               // XA RECOVER lists the XID
	twin   *xa.PreparedBranch // a listed branch equal but for its formatID
}

// precheck asks the server what phase 2 by XID must know first: what XA
// RECOVER lists and, when from.Session is set, whether the session that
// prepared the branch may still hold it.
//
// That session may still hold it while it is connected (fact 6), and also
// for a moment after it has left the process list: MariaDB 10.11 removes a
// closing session from the process list before InnoDB has detached its
// prepared transaction, and an XA COMMIT from elsewhere in that window can
// answer success without committing (the branch stays prepared in InnoDB
// and is missing from XA RECOVER until a restart). So once the session is
// out of the process list, precheck also makes sure that no InnoDB
// transaction of that session is left (freshTrx). Without the PROCESS
// privilege it cannot look, and the branch stays pending (alive says why)
// until the server restarts.
//
// None of this applies when the server restarted after from.Prepared
// (restartedSince: the server's start time and from.Prepared are both on
// the server's clock), or when the session is one of this RM's own that
// has ended its branches since from.Prepared.
func (rm *RM) precheck(ctx context.Context, s *session, xid xa.XID, from xa.Origin) (pc precheckResult, err error) {
	checkSession := from.Session != 0 && !rm.ownSessionWithout(from)
	// Without an origin (presumed abort, a sink's restore of an undecided
	// branch) the session that may hold the branch is not known: see
	// closingSession.
	checkClosing := from.Session == 0 && (s.server.mariaDB || !s.server.detachOnPrepare) && !rm.lacksProcess()
	q := "XA RECOVER"
	switch {
	case checkSession:
		q = serverStartQuery(s.server) + "; SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " +
			strconv.FormatUint(from.Session, 10) + "; " + q
	case checkClosing:
		q = "SELECT ID FROM information_schema.PROCESSLIST; " + q
	}
	rows, err := s.conn.QueryContext(ctx, q)
	if err != nil {
		return pc, err
	}
	defer rows.Close()
	var started int64
	var inList int
	connected := map[uint64]bool{}
	if checkClosing {
		for rows.Next() {
			var id uint64
			if err := rows.Scan(&id); err != nil {
				return pc, fmt.Errorf("process list: %w", err)
			}
			connected[id] = true
		}
		if !rows.NextResultSet() {
			return pc, fmt.Errorf("XA RECOVER returned no result: %w", rows.Err())
		}
	}
	if checkSession {
		if err := scanOne(rows, &started); err != nil {
			return pc, fmt.Errorf("server start time: %w", err)
		}
		if err := nextScanOne(rows, &inList); err != nil {
			return pc, fmt.Errorf("process list: %w", err)
		}
		if !rows.NextResultSet() {
			return pc, fmt.Errorf("XA RECOVER returned no result: %w", rows.Err())
		}
	}
	rs, err := scanRecover(rows)
	if err != nil {
		return pc, err
	}
	rows.Close()
	got := time.Now() // local: only compared with freshTrx's own readings
	for _, r := range rs {
		if bytes.Equal(r.gtrid, xid.Gtrid) && bytes.Equal(r.bqual, xid.Bqual) {
			if r.formatID == int64(xid.FormatID) {
				pc.listed = true
			} else {
				pc.twin = &r.branch
			}
		}
	}
	if checkClosing && pc.listed {
		return pc, rm.closingSession(ctx, s, got, connected, &pc)
	}
	if !checkSession {
		return pc, nil
	}
	restarted, ambiguous := restartedSince(started, from.Prepared)
	rm.log.Debug("mysql: phase 2 by XID: the preparing session", "xid", xid, "session", from.Session, "connected", inList > 0,
		"prepared", from.Prepared, "server started", time.Unix(started, 0), "restarted", restarted, "ambiguous", ambiguous)
	switch {
	case restarted:
		// That session is gone, and its id may now be somebody else's.
		return pc, nil
	case inList > 0 && !ambiguous:
		pc.alive = fmt.Errorf("preparing session %d still connected", from.Session)
		return pc, nil
	case rm.lacksProcess():
		pc.alive = rm.noProcessError(from.Session, inList > 0)
		return pc, nil
	}
	reading, err := rm.freshTrx(ctx, s, got)
	switch {
	case errNumber(err) == erSpecificAccess:
		// The snapshot transaction of the reading is still open.
		if err := s.exec(ctx, "ROLLBACK"); err != nil {
			return pc, err
		}
		rm.noProcess.Store(time.Now().UnixNano())
		rm.log.Warn("mysql: no PROCESS privilege: branches finished from another session stay pending (phase 2 by XID cannot see whether a closed session's branch is detached yet, fact 7)")
		pc.alive = rm.noProcessError(from.Session, inList > 0)
		return pc, nil
	case err != nil:
		return pc, err
	}
	switch {
	case reading.threads[from.Session] && inList > 0:
		pc.alive = fmt.Errorf("preparing session %d still connected", from.Session)
	case reading.threads[from.Session]:
		pc.alive = fmt.Errorf("preparing session %d has disconnected but InnoDB has not detached its transaction yet", from.Session)
	case inList > 0:
		// ambiguous: the id is connected, but the server may have
		// restarted since the prepare, and that session holds no InnoDB
		// transaction: it cannot be holding a branch that a commit
		// elsewhere could lose.
	}
	return pc, nil
}

// closingSession sets pc.alive when a session of the server is closing
// while InnoDB still holds a transaction of it: a session gone from the
// process list (connected, read before got) whose thread id INNODB_TRX
// still shows. Phase 2 of a branch whose origin is not known cannot wait
// for its own preparing session, as Commit and Rollback with an origin do;
// that session may be this closing one, and an XA COMMIT or XA ROLLBACK
// from elsewhere in that window can answer success without effect and
// leave the branch prepared inside InnoDB, unlisted, holding its locks
// until a restart (fact 7). So it waits until no session is closing. This
// narrows the window to the moment between the reading and the command;
// it does not close it (nothing on the server maps an XID to its session).
// Without the PROCESS privilege nothing can be seen: the command goes out,
// as before.
func (rm *RM) closingSession(ctx context.Context, s *session, got time.Time, connected map[uint64]bool, pc *precheckResult) error {
	reading, err := rm.freshTrx(ctx, s, got)
	switch {
	case errNumber(err) == erSpecificAccess:
		// The snapshot transaction of the reading is still open.
		if err := s.exec(ctx, "ROLLBACK"); err != nil {
			return err
		}
		rm.noProcess.Store(time.Now().UnixNano())
		return nil
	case err != nil:
		return err
	}
	for id := range reading.threads {
		if !connected[id] {
			pc.alive = fmt.Errorf("session %d is closing while InnoDB still holds its transaction, and the session that prepared "+
				"this branch is not known: it may be that one, and phase 2 from another session could be lost now (fact 7)", id)
			return nil
		}
	}
	return nil
}

// noProcessRecheck is how long an RM that found itself without the PROCESS
// privilege waits before it tries INNODB_TRX again (a GRANT takes effect for
// new connections).
const noProcessRecheck = time.Minute

// lacksProcess reports whether the server refused INNODB_TRX lately.
func (rm *RM) lacksProcess() bool {
	t := rm.noProcess.Load()
	return t != 0 && time.Since(time.Unix(0, t)) < noProcessRecheck
}

// noProcessError says why a branch prepared on session id stays pending
// without the PROCESS privilege.
func (rm *RM) noProcessError(id uint64, connected bool) error {
	state := "has left the process list"
	if connected {
		state = "is still connected or its id was given to a new session"
	}
	return fmt.Errorf("preparing session %d %s, and without the PROCESS privilege the RM cannot see whether InnoDB has detached its branch "+
		"(committing it from another session before then can lose the commit, fact 7): the branch stays pending "+
		"until GRANT PROCESS ON *.* TO %s (for new connections), or until the server restarts", id, state, rm.user)
}

// ownSessionWithout reports whether the session id of from is one of this
// RM's connections that cannot hold the branch: made after the prepare (the
// server restarted and reused the id), or released clean since. Both
// comparisons are on the server's clock (see serverClock).
func (rm *RM) ownSessionWithout(from xa.Origin) bool {
	v, ok := rm.conns.Load(from.Session)
	if !ok || from.Prepared.IsZero() {
		return false
	}
	dc := v.(*drvConn)
	if dc.clock.low(dc.dialed).After(from.Prepared) {
		return true
	}
	return !dc.xa.Load() && dc.cleanAt.Load() > from.Prepared.UnixNano()
}

// serverStartQuery returns a query of one row and column: when the server
// started, in whole seconds of the Unix epoch on the server's clock. It is
// computed on the server from the statement's start time and Uptime, both
// whole seconds of that statement: exact, and the same for every reader.
func serverStartQuery(si serverInfo) string {
	if si.mariaDB {
		return "SELECT UNIX_TIMESTAMP() - CAST(VARIABLE_VALUE AS SIGNED) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'"
	}
	// MySQL 8.
	return "SELECT UNIX_TIMESTAMP() - CAST(VARIABLE_VALUE AS SIGNED) FROM performance_schema.global_status WHERE VARIABLE_NAME = 'Uptime'"
}

// trxReadings shares readings of information_schema.INNODB_TRX among the
// concurrent callers of every RM of the process on one server. MariaDB
// serves INNODB_TRX from a snapshot that it refreshes only when the
// previous read is more than 0.1 s old, so concurrent readers would keep
// each other stale forever. One reading at a time, at least 0.11 s apart
// (plus a random delay after a stale one, against other processes reading
// in step), serves everybody who asked before it began.
type trxReadings struct {
	mu       sync.Mutex
	taken    time.Time     // when the last fresh reading's transaction began
	last     trxReading    // the last fresh reading
	lastRead time.Time     // when the last reading ended
	busy     chan struct{} // closed when the reading in flight ends
}

// trxReading is one reading of information_schema.INNODB_TRX.
type trxReading struct {
	threads map[uint64]bool // sessions with an InnoDB transaction
}

// freshTrx returns a reading of INNODB_TRX taken after after. A reading is
// fresh when it shows the transaction that the reading session itself
// opened just before. A reading this call takes runs on s; after an error
// s may be left inside a transaction.
func (rm *RM) freshTrx(ctx context.Context, s *session, after time.Time) (trxReading, error) {
	r := rm.trx
	stale := 0
	for {
		r.mu.Lock()
		if r.taken.After(after) {
			got := r.last
			r.mu.Unlock()
			return got, nil
		}
		if r.busy != nil {
			ch := r.busy
			r.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return trxReading{}, ctx.Err()
			}
		}
		ch := make(chan struct{})
		r.busy = ch
		wait := trxCacheAge - time.Since(r.lastRead)
		if stale > 0 {
			wait += rand.N(trxCacheAge)
		}
		r.mu.Unlock()

		var taken time.Time
		var got trxReading
		var fresh bool
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(wait):
			taken, got, fresh, err = rm.readTrx(ctx, s)
		}
		r.mu.Lock()
		r.lastRead = time.Now()
		if fresh {
			r.taken, r.last = taken, got
		}
		r.busy = nil
		close(ch)
		r.mu.Unlock()
		if err != nil {
			return trxReading{}, err
		}
		if !fresh {
			if stale++; stale == staleReadings {
				return trxReading{}, fmt.Errorf("no fresh reading of information_schema.INNODB_TRX after %d tries (somebody reads it more often than every 0.1 s)", stale)
			}
		}
	}
}

const (
	// trxCacheAge is how long INNODB_TRX must go unread for MariaDB to
	// refresh it.
	trxCacheAge = 110 * time.Millisecond
	// staleReadings bounds the readings freshTrx takes.
	staleReadings = 5
)

// readTrx takes one reading of INNODB_TRX inside a snapshot transaction
// of session s, in one round trip.
func (rm *RM) readTrx(ctx context.Context, s *session) (taken time.Time, got trxReading, fresh bool, err error) {
	taken = time.Now()
	rows, err := s.conn.QueryContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT; "+
		"SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id <> 0; COMMIT")
	if err != nil {
		return taken, got, false, err
	}
	defer rows.Close()
	got.threads = map[uint64]bool{}
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return taken, trxReading{}, false, err
		}
		got.threads[id] = true
	}
	if err := rows.Err(); err != nil {
		return taken, trxReading{}, false, err
	}
	for rows.NextResultSet() {
	}
	if err := rows.Err(); err != nil {
		return taken, trxReading{}, false, err
	}
	fresh = got.threads[s.id]
	// The reading's own snapshot transaction is no branch. After a
	// restart the reader's id may be the one a caller asks about.
	delete(got.threads, s.id)
	rm.log.Debug("mysql: INNODB_TRX reading", "sessions", len(got.threads), "fresh", fresh)
	return taken, got, fresh, nil
}

// scanOne scans the first row of the current result set.
func scanOne(rows *sql.Rows, dest ...any) error {
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errors.New("no row")
	}
	return rows.Scan(dest...)
}

// nextScanOne moves to the next result set and scans its first row.
func nextScanOne(rows *sql.Rows, dest ...any) error {
	if !rows.NextResultSet() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errors.New("no result")
	}
	return scanOne(rows, dest...)
}

// restartedSince tells whether the server, which started within the
// second started of its clock (serverStartQuery), started after prepared,
// the prepare's time on the same clock (this driver's Origin.Prepared, see
// branch.Origin): no other host's clock takes part.
//
// The start is known to the second only, and a restart can take less than
// a second (0.5 s measured here). Origin.Prepared is never earlier than the
// end of the second in which the preparing session's server started (a
// prepare in that very second is dated to its end), so:
//
//   - prepared before the end of the second in which the current server
//     started: that is another server process than the preparing one,
//     which had started a second or more before prepared: restarted;
//   - prepared a second or more after that: the current server was up
//     before the prepare: not restarted;
//   - in between, ambiguous: the current server may be the preparing one
//     (the prepare fell in its first second), or one that started in the
//     same second as the preparing one, after the prepare.
//
// This holds as long as the server's clock does not step back.
func restartedSince(started int64, prepared time.Time) (restarted, ambiguous bool) {
	if prepared.IsZero() {
		return false, false
	}
	end := time.Unix(started+1, 0)
	switch {
	case prepared.Before(end):
		return true, false
	case prepared.Before(end.Add(time.Second)):
		return false, true
	}
	return false, false
}
