package sqllog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/xadb/xa/recovery"
)

// acquireMode says who takes a lease, and so what is recorded.
type acquireMode int

const (
	acquireOwn      acquireMode = 1 + iota // the log's node (Open, and again after losing it)
	acquireTakeover                        // a live node, for a dead one
	acquireManual                          // an operator (xactl recover --takeover)
)

func (m acquireMode) kind() string {
	switch m {
	case acquireOwn:
		return "own"
	case acquireTakeover:
		return "takeover"
	}
	return "manual"
}

// leaseRow is a log's lease as the database holds it.
type leaseRow struct {
	holder                   string
	epoch                    int64
	kind                     string
	ttl, expires             int64 // µs
	acquired, renewed        int64 // µs
	clean                    bool
	nodeOffset               int64 // µs
	logEpoch                 int64 // xa_log_logs.epoch: the fence
	now                      int64 // the database's clock when read (µs)
	free, expired, heldAlive bool
}

func (r *leaseRow) judge() {
	r.free = r.holder == ""
	r.expired = !r.free && r.expires <= r.now
	r.heldAlive = !r.free && !r.expired
}

// measureOffset measures the database's clock against this process's
// (Options.Clock) and returns their difference in µs: database minus
// process, to within half a round trip.
func (l *Log) measureOffset(ctx context.Context) (int64, error) {
	t0 := l.opts.Clock()
	var db int64
	if err := l.db.QueryRowContext(ctx, l.d.q(`SELECT `+l.d.now("?")), l.s.dbNow()).Scan(&db); err != nil {
		return 0, err
	}
	t1 := l.opts.Clock()
	mid := t0.Add(t1.Sub(t0) / 2)
	return db - mid.UnixMicro(), nil
}

// uptime returns how long the database server has been running.
func (l *Log) uptime(ctx context.Context) (time.Duration, error) {
	if l.d == Postgres {
		var us int64
		err := l.db.QueryRowContext(ctx, `SELECT (extract(epoch FROM clock_timestamp() - pg_postmaster_start_time()) * 1000000)::bigint`).Scan(&us)
		return time.Duration(us) * time.Microsecond, err
	}
	var name, v string
	if err := l.db.QueryRowContext(ctx, `SHOW GLOBAL STATUS LIKE 'Uptime'`).Scan(&name, &v); err != nil {
		return 0, err
	}
	s, err := strconv.ParseInt(v, 10, 64)
	return time.Duration(s) * time.Second, err
}

// acquire takes the log's lease at a new epoch, in one transaction that
// commits durably: the lease row, locked, must be free or expired by the
// database's clock (and, when expired, the database must have run for
// three TTLs at least, so that holders alive through a restart of the
// database renew first); the log's row gets the new epoch, which waits for every
// write in flight under the old one and refuses every later one; and the
// event is recorded. A lease held by another live process is ErrLeaseHeld.
func (l *Log) acquire(ctx context.Context, mode acquireMode, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, l.opts.WriteTimeout+l.opts.LeaseTTL)
	defer cancel()
	var offset int64
	if mode == acquireOwn {
		o, err := l.measureOffset(ctx)
		if err != nil {
			return fmt.Errorf("sqllog: reading the database's clock: %w", err)
		}
		offset = o
	}
	tx, err := l.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("sqllog: taking the lease of node %s's log: %w", l.ident.Node, err)
	}
	defer tx.Rollback() //nolint:errcheck
	if l.d == Postgres {
		if _, err := tx.ExecContext(ctx, syncOn); err != nil {
			return err
		}
	}
	r, err := l.readLease(ctx, tx, true)
	if err != nil {
		return err
	}
	switch {
	case r.heldAlive:
		return fmt.Errorf("%w: node %s's log is held by %s (epoch %d, %s), renewed %v ago, expires in %v by the database's clock",
			ErrLeaseHeld, l.ident.Node, r.holder, r.epoch, r.kind, usAgo(r.now-r.renewed), usAgo(r.expires-r.now))
	case r.free && r.clean && mode == acquireTakeover &&
		(l.opts.RescanReleased <= 0 || r.now-r.expires < l.opts.RescanReleased.Microseconds()):
		// Another process recovered it since the caller looked (a log
		// released clean is looked at again only RescanReleased later).
		return fmt.Errorf("%w: node %s's log was released with nothing in doubt: nothing to take over", ErrNothingToTakeOver, l.ident.Node)
	case r.expired:
		up, err := l.uptime(ctx)
		if err != nil {
			return fmt.Errorf("sqllog: reading the database's uptime: %w", err)
		}
		// Every lease expires while the database is down; its holders
		// renew once it is back, on connections that must be made anew.
		if wait := restartGrace(time.Duration(r.ttl) * time.Microsecond); up < wait {
			return fmt.Errorf("%w: node %s's log is held by %s (epoch %d), whose lease expired, but the database has run for only %v: "+
				"a holder alive through its restart gets %v to renew first", ErrLeaseHeld, l.ident.Node, r.holder, r.epoch, up.Round(time.Millisecond), wait)
		}
	}
	epoch := max(r.epoch, r.logEpoch) + 1
	// The fence: waits for every decision write holding the row under the
	// old epoch, and refuses every one after.
	if _, err := tx.ExecContext(ctx, l.d.q(`UPDATE xa_log_logs SET epoch = ? WHERE log_id = ?`), epoch, l.id); err != nil {
		return fmt.Errorf("sqllog: moving node %s's log to epoch %d: %w", l.ident.Node, epoch, err)
	}
	ttl := l.opts.LeaseTTL.Microseconds()
	setOffset := "node_offset_us"
	if mode == acquireOwn {
		setOffset = "?"
	}
	// Right-hand sides read the row as it was (PostgreSQL) or as it is
	// being changed (MySQL): the TTL is given, never read from the row.
	args := []any{l.opts.Holder, epoch, mode.kind(), ttl}
	q := `UPDATE xa_log_leases SET holder = ?, epoch = ?, kind = ?, ttl_us = ?, expires_us = ` + l.d.now("?") + ` + ?,
		acquired_us = ` + l.d.now("?") + `, renewed_us = ` + l.d.now("?") + `, clean = ?, node_offset_us = ` + setOffset + ` WHERE log_id = ?`
	args = append(args, l.s.dbNow(), ttl, l.s.dbNow(), l.s.dbNow(), false)
	if mode == acquireOwn {
		args = append(args, offset)
	}
	args = append(args, l.id)
	if _, err := tx.ExecContext(ctx, l.d.q(q), args...); err != nil {
		return fmt.Errorf("sqllog: taking the lease of node %s's log: %w", l.ident.Node, err)
	}
	action := "acquire"
	if mode != acquireOwn {
		action = "takeover"
	}
	why := reason
	switch {
	case r.expired:
		why = fmt.Sprintf("%s; the lease of %s (epoch %d) had expired %v before, by the database's clock", reason, r.holder, r.epoch, usAgo(r.now-r.expires))
	case !r.clean && r.epoch > 0:
		why = fmt.Sprintf("%s; released at epoch %d with work possibly left", reason, r.epoch)
	}
	if mode == acquireManual {
		why = "manual: " + why
	}
	if err := l.s.event(ctx, tx, l.id, action, epoch, l.opts.Holder, r.holder, r.epoch, why); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqllog: taking the lease of node %s's log (the outcome is unknown; it expires if it was taken): %w", l.ident.Node, err)
	}
	l.mu.Lock()
	l.epoch, l.lost, l.lostAt = epoch, false, 0
	l.mu.Unlock()
	if mode == acquireOwn {
		l.offset.Store(offset)
	} else {
		l.offset.Store(r.nodeOffset) // the node's clock, as it measured it last
	}
	lvl := "took the log's lease"
	if action == "takeover" {
		lvl = "took over a log whose lease had expired or was released"
	}
	l.opts.Logger.Info(lvl, "node", l.ident.Node, "log", l.id, "epoch", epoch, "holder", l.opts.Holder, "previous", r.holder, "previous_epoch", r.epoch, "why", why)
	return nil
}

// readLease reads the log's lease with the database's clock; forUpdate
// locks its row.
func (l *Log) readLease(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, forUpdate bool) (leaseRow, error) {
	var r leaseRow
	s := `SELECT e.holder, e.epoch, e.kind, e.ttl_us, e.expires_us, e.acquired_us, e.renewed_us, e.clean, e.node_offset_us, g.epoch, ` + l.d.now("?") + `
		FROM xa_log_leases e JOIN xa_log_logs g ON g.log_id = e.log_id WHERE e.log_id = ?`
	if forUpdate {
		if l.d == Postgres {
			s += ` FOR UPDATE OF e`
		} else {
			s += ` FOR UPDATE`
		}
	}
	err := q.QueryRowContext(ctx, l.d.q(s), l.s.dbNow(), l.id).Scan(&r.holder, &r.epoch, &r.kind, &r.ttl, &r.expires, &r.acquired, &r.renewed,
		&r.clean, &r.nodeOffset, &r.logEpoch, &r.now)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: node %s's log has no lease row", ErrNoLog, l.ident.Node)
	}
	if err != nil {
		return r, fmt.Errorf("sqllog: reading the lease of node %s's log: %w", l.ident.Node, err)
	}
	r.judge()
	return r, nil
}

func usAgo(us int64) time.Duration {
	d := time.Duration(us) * time.Microsecond
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// renew extends the lease by a TTL from the database's clock, if this
// process still holds it at its epoch. lost: another process took it over.
func (l *Log) renew(ctx context.Context) (lost bool, err error) {
	l.mu.Lock()
	epoch, wasLost := l.epoch, l.lost
	l.mu.Unlock()
	if wasLost || epoch == 0 {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.opts.WriteTimeout)
	defer cancel()
	setOffset, args := "", []any{l.s.dbNow(), l.opts.LeaseTTL.Microseconds(), l.s.dbNow()}
	if l.role == roleOwner {
		off, err := l.measureOffset(ctx)
		if err != nil {
			return false, err
		}
		l.offset.Store(off)
		setOffset, args = ", node_offset_us = ?", append(args, off)
	}
	args = append(args, l.id, l.opts.Holder, epoch)
	res, err := l.db.ExecContext(ctx, l.d.q(`UPDATE xa_log_leases SET expires_us = `+l.d.now("?")+` + ?, renewed_us = `+l.d.now("?")+setOffset+`
		WHERE log_id = ? AND holder = ? AND epoch = ?`), args...)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return false, nil
	}
	// No row changed: taken over, or (MySQL) a row written with the same
	// values. Look.
	r, err := l.readLease(ctx, l.db, false)
	if err != nil {
		return false, err
	}
	if r.holder == l.opts.Holder && r.epoch == epoch && r.logEpoch == epoch {
		return false, nil
	}
	l.noteLost(epoch, r.logEpoch)
	return true, nil
}

// renewLoop renews the lease every third of its TTL until Close. An owner
// that lost its lease takes it again once it is free or expired (the
// process that took it over holds it until nothing of the log is left in
// doubt), at a new epoch, and goes on.
func (l *Log) renewLoop() {
	defer close(l.renewDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-l.stopRenew
		cancel()
	}()
	every := l.opts.LeaseTTL / 3
	t := time.NewTimer(every)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-l.stopRenew:
			return
		case <-t.C:
		}
		lost, err := l.renew(ctx)
		if err != nil {
			if ctx.Err() == nil {
				l.opts.Logger.Warn("renewing the decision log's lease failed; trying again", "node", l.ident.Node, "err", err)
			}
			// Soon: after the log database restarted, every connection
			// of the pool fails once, and the lease is to be renewed
			// before three TTLs of its uptime have passed.
			failures++
			t.Reset(min(time.Duration(failures)*50*time.Millisecond, every))
			continue
		}
		failures = 0
		t.Reset(every)
		if !lost || l.role != roleOwner {
			continue
		}
		l.mu.Lock()
		old := l.epoch
		l.mu.Unlock()
		err = l.acquire(ctx, acquireOwn, fmt.Sprintf("taken again by its node after losing it at epoch %d", old))
		if err != nil && ctx.Err() == nil {
			l.opts.Logger.Info("the decision log's lease is not back yet", "node", l.ident.Node, "err", err)
		}
	}
}

// Release gives the lease up, if this process still holds it: it is free
// at once, and another process may take it. clean says that nothing of the
// log is left in doubt (a takeover that finished): live nodes then leave
// it alone until its node comes back; a lease released unclean (a node
// that stopped) is taken over by a live node, which checks.
func (l *Log) Release(ctx context.Context, clean bool) error {
	l.mu.Lock()
	epoch, lost := l.epoch, l.lost
	l.mu.Unlock()
	if epoch == 0 || lost {
		return nil
	}
	tx, err := l.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("sqllog: releasing the lease: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck
	res, err := tx.ExecContext(ctx, l.d.q(`UPDATE xa_log_leases SET holder = '', expires_us = `+l.d.now("?")+`, clean = ?
		WHERE log_id = ? AND holder = ? AND epoch = ?`), l.s.dbNow(), clean, l.id, l.opts.Holder, epoch)
	if err != nil {
		return fmt.Errorf("sqllog: releasing the lease: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	why := "released"
	if clean {
		why = "released: nothing of the log is left in doubt"
	}
	if err := l.s.event(ctx, tx, l.id, "release", epoch, "", l.opts.Holder, epoch, why); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqllog: releasing the lease: %w", err)
	}
	l.mu.Lock()
	l.epoch = 0
	l.mu.Unlock()
	l.opts.Logger.Info("released the decision log's lease", "node", l.ident.Node, "log", l.id, "epoch", epoch, "clean", clean)
	return nil
}

// Presumption says when recovery with this log may presume abort: after
// the grace period for its owner (its own coordinator may be deciding),
// at once for a process that took it over (the database refuses every
// decision of the previous holders since), never for a process that holds
// no lease or lost it (the holder's recovery presumes, not this one).
func (l *Log) Presumption(ctx context.Context) (recovery.Presumption, string, error) {
	l.mu.Lock()
	epoch, lost, lostAt, r := l.epoch, l.lost, l.lostAt, l.role
	l.mu.Unlock()
	switch {
	case r != roleObserver && lost:
		return recovery.PresumeNever, fmt.Sprintf("this process's lease of node %s's log (epoch %d) was taken over (epoch %d): the process that holds it now presumes abort",
			l.ident.Node, epoch, lostAt), nil
	case r == roleOwner && epoch > 0:
		return recovery.PresumeAfterGrace, "", nil
	case r == roleTaker && epoch > 0:
		return recovery.PresumeNow, fmt.Sprintf("node %s's log was taken over at epoch %d: its previous holders' decisions are refused since", l.ident.Node, epoch), nil
	}
	row, err := l.readLease(ctx, l.db, false)
	if err != nil {
		return 0, "", err
	}
	if r != roleOwner {
		l.offset.Store(row.nodeOffset)
	}
	switch {
	case row.heldAlive:
		return recovery.PresumeNever, fmt.Sprintf("node %s's log is held by %s (epoch %d), renewed %v ago: its recovery presumes abort", l.ident.Node, row.holder,
			row.epoch, usAgo(row.now-row.renewed)), nil
	case row.expired:
		return recovery.PresumeNever, fmt.Sprintf("node %s's log lease (%s, epoch %d) expired %v ago: a live node takes it over, or xactl recover --takeover",
			l.ident.Node, row.holder, row.epoch, usAgo(row.now-row.expires)), nil
	}
	return recovery.PresumeNever, fmt.Sprintf("nobody holds node %s's log: its node, when it starts, or xactl recover --takeover presumes abort", l.ident.Node), nil
}

// restartGrace is how long after a restart of the log database no
// expired lease of a lease's time ttl is taken over: three of its
// renewal periods' worth of TTLs, so that holders alive through the
// restart renew first.
func restartGrace(ttl time.Duration) time.Duration { return 3 * ttl }
