package sqllog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// role is how a Log was opened.
type role int

const (
	roleOwner    role = 1 + iota // Open: the node's own process, holding the lease
	roleTaker                    // TakeOver: another process, holding the lease after taking it over
	roleObserver                 // Observe: no lease (xactl beside the live nodes)
)

func (r role) String() string {
	switch r {
	case roleOwner:
		return "owner"
	case roleTaker:
		return "taker"
	case roleObserver:
		return "observer"
	}
	return "role(invalid)"
}

// Log is one node's decision log in the store's tables. It implements
// xa.RecoveryLog, and recovery.Leased. Its methods are safe for concurrent
// use.
type Log struct {
	s     *Store
	db    *sql.DB
	d     Dialect
	opts  Options
	ident xa.LogIdentity
	id    string // ident.ID.String()
	role  role

	mu     sync.Mutex
	epoch  int64 // the epoch of the lease this process holds or held; 0: none
	lost   bool  // the lease was taken over from this process
	lostAt int64 // the epoch that took it over, when known
	closed bool

	// offset is the database's clock minus this process's (Options.Clock),
	// in microseconds, measured at the lease's acquisition and renewals.
	offset atomic.Int64

	identMu sync.Mutex // serialises LogDelegation and LogParticipant
	b       *batcher   // group commit (owner only)

	stopRenew chan struct{}
	renewDone chan struct{}
}

var (
	_ xa.RecoveryLog     = (*Log)(nil)
	_ recovery.Leased    = (*Log)(nil)
	_ recovery.NodeClock = (*Log)(nil)
)

// OnLogClock translates a begin time stamped by the log's node into the
// database's clock, which stamped the log's creation, by the offset the
// node measured last.
func (l *Log) OnLogClock(begun time.Time) time.Time {
	return begun.Add(time.Duration(l.offset.Load()) * time.Microsecond)
}

func (s *Store) newLog(ident xa.LogIdentity, r role) *Log {
	return &Log{s: s, db: s.db, d: s.d, opts: s.opts, ident: ident, id: ident.ID.String(), role: r}
}

// Identity returns the log's identity, as Create wrote it.
func (l *Log) Identity() xa.LogIdentity { return l.ident }

// Epoch returns the lease epoch this process holds (0 for a log opened
// with Observe), and whether another process took it over since.
func (l *Log) Epoch() (epoch int64, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch, l.lost
}

// Store returns the store the log is in.
func (l *Log) Store() *Store { return l.s }

// Holder returns the name this process holds leases under.
func (l *Log) Holder() string { return l.opts.Holder }

// start starts the lease's renewal and, for an owner, group commit.
func (l *Log) start() {
	l.stopRenew = make(chan struct{})
	l.renewDone = make(chan struct{})
	if l.role == roleOwner {
		l.b = newBatcher(l)
	}
	go l.renewLoop()
}

// Close stops group commit (waiting for the batches in flight), stops
// renewing the lease and releases it (not clean: the log's node may have
// left work to recovery, which a process that takes it over finishes).
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	if l.b != nil {
		l.b.close()
	}
	if l.stopRenew == nil {
		return nil
	}
	close(l.stopRenew)
	<-l.renewDone
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.WriteTimeout)
	defer cancel()
	return l.Release(ctx, false)
}

func (l *Log) usable() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	return nil
}

// holding returns the epoch this process writes decisions under, or the
// error that says why it may not: it holds no lease (ErrNotHolder), or it
// knows the lease was taken over (xa.ErrFenced). Holding an epoch is no
// proof: the database checks it again on every write.
func (l *Log) holding(op string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return 0, ErrClosed
	case l.role == roleObserver || l.epoch == 0:
		return 0, fmt.Errorf("sqllog: %s: %w (node %s's log is held by its own process; xactl records decisions only by taking the log over)", op, ErrNotHolder, l.ident.Node)
	case l.lost:
		return 0, fenced(op, l.epoch, l.lostAt)
	}
	return l.epoch, nil
}

// noteLost records that the database says the lease moved on past epoch.
func (l *Log) noteLost(epoch, now int64) {
	l.mu.Lock()
	first := !l.lost && l.epoch == epoch
	if first {
		l.lost, l.lostAt = true, now
	}
	l.mu.Unlock()
	if first {
		l.opts.Logger.Error("the decision log was taken over by another process: its decisions are refused from now on",
			"node", l.ident.Node, "log", l.id, "epoch", epoch, "now", now)
	}
}

// writeTx runs fn in a transaction that commits durably. With epoch > 0 it
// first takes a shared lock on the log's row and refuses (xa.ErrFenced)
// when the row's epoch moved on: a takeover's update of the epoch waits
// for the transaction, and the transaction for a takeover's. now is the
// database's clock and offset the log's node's clock offset to it (µs),
// read in the same statement. An error before the commit means nothing
// was written; one from the commit wraps xa.ErrOutcomeUnknown.
func (l *Log) writeTx(ctx context.Context, op string, epoch int64, fn func(tx *sql.Tx, now, offset int64) error) error {
	ctx, cancel := context.WithTimeout(ctx, l.opts.WriteTimeout)
	defer cancel()
	tx, err := l.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("sqllog: %s: %w", op, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	q := `SELECT g.epoch, ` + l.d.now("?") + `, e.node_offset_us`
	if l.d == Postgres {
		q += `, ` + syncOnExpr
	}
	q += ` FROM xa_log_logs g JOIN xa_log_leases e ON e.log_id = g.log_id WHERE g.log_id = ?`
	if epoch > 0 {
		if l.d == Postgres {
			q += ` FOR SHARE OF g`
		} else {
			q += ` LOCK IN SHARE MODE`
		}
	}
	var cur, now, offset int64
	dest := []any{&cur, &now, &offset}
	if l.d == Postgres {
		var sc string
		dest = append(dest, &sc)
	}
	if err := tx.QueryRowContext(ctx, l.d.q(q), l.s.dbNow(), l.id).Scan(dest...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqllog: %s: %w: log %s is gone from the database", op, ErrNoLog, l.id)
		}
		return fmt.Errorf("sqllog: %s: %w", op, err)
	}
	if epoch > 0 && cur != epoch {
		l.noteLost(epoch, cur)
		return fenced(op, epoch, cur)
	}
	if err := fn(tx, now, offset); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return unknown("sqllog: "+op, err)
	}
	return nil
}

// LogCommit makes rec durable: it joins the next group-commit batch, one
// database transaction for every record queued meanwhile, and returns nil
// once that transaction committed (synchronous_commit forced on, on
// PostgreSQL). Until then the record is invisible to every reader.
//
// The database refuses, in the batch's own statement or transaction:
//   - a record whose transaction has an abort record (one row per log and
//     global id: a commit and an abort cannot both be stored):
//     xa.ErrAbortRecorded;
//   - one whose transaction's deadline (its begin, translated to the
//     database's clock by the offset measured at the lease's renewals,
//     plus the log's timeout) has passed by the database's clock:
//     xa.ErrDecisionTooLate;
//   - every record of the batch when the log's epoch is no longer this
//     process's: xa.ErrFenced (another process took the log over).
//
// Nothing was logged then. Any other error wraps xa.ErrOutcomeUnknown.
// Only the log's owner (Open) logs commits.
func (l *Log) LogCommit(ctx context.Context, rec xa.CommitRecord) error {
	if l.role != roleOwner {
		_, err := l.holding("log commit")
		if err == nil {
			err = fmt.Errorf("sqllog: log commit: %w (a log taken over takes no commit decision)", ErrNotHolder)
		}
		return err
	}
	payload, err := rec.MarshalBinary()
	if err != nil {
		return fmt.Errorf("sqllog: commit %v: %w", rec.ID, err)
	}
	var check xa.CommitRecord
	if err := check.UnmarshalBinary(payload); err != nil {
		return fmt.Errorf("sqllog: commit %v cannot be logged, it would not decode: %w", rec.ID, err)
	}
	if _, err := l.holding("log commit"); err != nil {
		return err
	}
	return l.b.commit(ctx, check, payload)
}

// deadline returns the commit deadline of a transaction begun at begun
// (this process's clock) on the database's clock, in microseconds.
func (l *Log) deadline(begun time.Time) int64 {
	return begun.UnixMicro() + l.offset.Load() + l.ident.Timeout.Microseconds()
}

// Forget drops the commit record of id. It is not durable when it
// returns: the owner's forgets go with the next batch (or a batch of
// forgets after a short while), others' are one statement. Forgets are not
// fenced: every branch of id has acknowledged, whoever says so.
func (l *Log) Forget(ctx context.Context, id xa.GlobalID) error {
	if err := l.usable(); err != nil {
		return err
	}
	if l.b != nil {
		l.b.forget(id.String())
		return nil
	}
	_, err := l.db.ExecContext(ctx, l.d.q(`DELETE FROM xa_log_decisions WHERE log_id = ? AND gid = ? AND kind = 'C'`), l.id, id.String())
	if err != nil {
		return fmt.Errorf("sqllog: forget %v: %w", id, err)
	}
	return nil
}

// LogAbort makes an abort record for rec.ID durable, stamped with the
// database's clock. A commit record for rec.ID (stored, or being stored:
// the insert waits for it) refuses it with xa.ErrCommitRecorded; an abort
// record there already makes it a no-op (the first stays). Written by the
// lease's holder (the owner's or a taker's recovery), it carries the
// holder's epoch and is refused (xa.ErrFenced) once that moved on, so
// that a process that lost the log presumes no abort of a live node's
// transactions; written without the lease (an operator's rollback, xactl
// beside the live nodes), it is not fenced: the decision row decides.
//
// The record is kept until KeptUntil by the database's clock, with the
// transaction's deadline measured as LogCommit does, by the log's node's
// offset to the database's clock.
func (l *Log) LogAbort(ctx context.Context, rec xa.AbortRecord) error {
	if rec.ID.IsZero() {
		return errors.New("sqllog: abort record without a global id")
	}
	if _, err := (xa.AbortRecord{ID: rec.ID, Reason: rec.Reason}).MarshalBinary(); err != nil {
		return fmt.Errorf("sqllog: abort %v: %w", rec.ID, err)
	}
	var epoch int64
	if l.role != roleObserver {
		e, err := l.holding("log abort")
		if err != nil {
			return err
		}
		epoch = e
	} else if err := l.usable(); err != nil {
		return err
	}
	gid := rec.ID.String()
	timeout := l.ident.Timeout.Microseconds()
	retention := xa.AbortRetention.Microseconds()
	return l.writeTx(ctx, "log abort", epoch, func(tx *sql.Tx, now, offset int64) error {
		keep := max(now, rec.ID.Begun.UnixMicro()+offset+timeout) + retention
		res, err := tx.ExecContext(ctx, l.d.q(`INSERT INTO xa_log_decisions (log_id, gid, kind, epoch, logged_us, begun_us, keep_us, reason, rec)
			VALUES (?, ?, 'A', ?, ?, ?, ?, ?, NULL) `+l.onConflictNothing()),
			l.id, gid, epoch, now, rec.ID.Begun.UnixMicro(), keep, rec.Reason)
		if err != nil {
			return fmt.Errorf("sqllog: abort %v: %w", rec.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var kind string
		err = tx.QueryRowContext(ctx, l.d.q(`SELECT kind FROM xa_log_decisions WHERE log_id = ? AND gid = ?`), l.id, gid).Scan(&kind)
		switch {
		case err != nil:
			return fmt.Errorf("sqllog: abort %v: reading the decision that refused it: %w", rec.ID, err)
		case kind == "C":
			return fmt.Errorf("sqllog: abort %v refused: %w", rec.ID, xa.ErrCommitRecorded)
		}
		return nil // recorded already: the first one stays
	})
}

// onConflictNothing ends an INSERT of one decision row so that a row for
// the same log and global id makes it insert nothing (and report 0 rows).
func (l *Log) onConflictNothing() string {
	if l.d == Postgres {
		return `ON CONFLICT (log_id, gid) DO NOTHING`
	}
	return `ON DUPLICATE KEY UPDATE log_id = log_id`
}

// ForgetAbort drops the abort record of id once its retention has passed
// by the database's clock; until then it refuses with ErrRetained and
// keeps it. Not fenced, not durable when it returns.
func (l *Log) ForgetAbort(ctx context.Context, id xa.GlobalID) error {
	if err := l.usable(); err != nil {
		return err
	}
	gid := id.String()
	res, err := l.db.ExecContext(ctx, l.d.q(`DELETE FROM xa_log_decisions WHERE log_id = ? AND gid = ? AND kind = 'A' AND keep_us <= `+l.d.now("?")),
		l.id, gid, l.s.dbNow())
	if err != nil {
		return fmt.Errorf("sqllog: forget abort %v: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	var keep, now int64
	err = l.db.QueryRowContext(ctx, l.d.q(`SELECT keep_us, `+l.d.now("?")+` FROM xa_log_decisions WHERE log_id = ? AND gid = ? AND kind = 'A'`),
		l.s.dbNow(), l.id, gid).Scan(&keep, &now)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqllog: forget abort %v: %w", id, err)
	}
	return fmt.Errorf("%w: the abort record of %v is kept until %s by the database's clock (now %s)", ErrRetained, id,
		time.UnixMicro(keep).UTC().Format(time.RFC3339), time.UnixMicro(now).UTC().Format(time.RFC3339))
}

// LogDelegation durably records delegation d, stamped with the database's
// clock, under the rule of xa.MergeDelegation. Only the lease's holder
// writes it, under its epoch (xa.ErrFenced once it moved on).
func (l *Log) LogDelegation(ctx context.Context, d xa.Delegation) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("sqllog: delegation: %w", err)
	}
	epoch, err := l.holding("log delegation")
	if err != nil {
		return err
	}
	l.identMu.Lock()
	defer l.identMu.Unlock()
	return l.writeTx(ctx, "log delegation", epoch, func(tx *sql.Tx, now, _ int64) error {
		var held xa.Delegation
		var logged int64
		err := tx.QueryRowContext(ctx, l.d.q(`SELECT participant, tbl, table_id, logged_us FROM xa_log_delegations WHERE log_id = ? AND participant = ? FOR UPDATE`),
			l.id, d.Participant).Scan(&held.Participant, &held.Table, &held.TableID, &logged)
		ok := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqllog: delegation to %q: %w", d.Participant, err)
		}
		store, err := xa.MergeDelegation(held, ok, d)
		if err != nil || !store {
			return err
		}
		q := `INSERT INTO xa_log_delegations (tbl, table_id, logged_us, log_id, participant) VALUES (?, ?, ?, ?, ?)`
		if ok {
			q = `UPDATE xa_log_delegations SET tbl = ?, table_id = ?, logged_us = ? WHERE log_id = ? AND participant = ?`
		}
		if _, err := tx.ExecContext(ctx, l.d.q(q), d.Table, d.TableID, now, l.id, d.Participant); err != nil {
			return fmt.Errorf("sqllog: delegation to %q: %w", d.Participant, err)
		}
		return nil
	})
}

// LogParticipant durably records p, stamped with the database's clock,
// under the rule of xa.MergeParticipant. Only the lease's holder writes
// it, under its epoch.
func (l *Log) LogParticipant(ctx context.Context, p xa.ParticipantRecord) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("sqllog: participant: %w", err)
	}
	epoch, err := l.holding("log participant")
	if err != nil {
		return err
	}
	l.identMu.Lock()
	defer l.identMu.Unlock()
	return l.writeTx(ctx, "log participant", epoch, func(tx *sql.Tx, now, _ int64) error {
		var held xa.ParticipantRecord
		var logged int64
		err := tx.QueryRowContext(ctx, l.d.q(`SELECT name, store_id, store_where, logged_us FROM xa_log_participants WHERE log_id = ? AND name = ? FOR UPDATE`),
			l.id, p.Name).Scan(&held.Name, &held.Identity.ID, &held.Identity.Where, &logged)
		ok := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqllog: participant %q: %w", p.Name, err)
		}
		store, err := xa.MergeParticipant(held, ok, p)
		if err != nil || !store {
			return err
		}
		if _, err := tx.ExecContext(ctx, l.d.q(`INSERT INTO xa_log_participants (log_id, name, store_id, store_where, logged_us) VALUES (?, ?, ?, ?, ?)`),
			l.id, p.Name, p.Identity.ID, p.Identity.Where, now); err != nil {
			return fmt.Errorf("sqllog: participant %q: %w", p.Name, err)
		}
		return nil
	})
}

// LogHeuristic makes h durable. Heuristic records are facts, not
// decisions: whoever saw one records it, lease or not.
func (l *Log) LogHeuristic(ctx context.Context, h xa.HeuristicRecord) error {
	b, err := h.MarshalBinary()
	if err != nil {
		return fmt.Errorf("sqllog: heuristic %v: %w", h.XID, err)
	}
	if err := l.usable(); err != nil {
		return err
	}
	return l.writeTx(ctx, "log heuristic", 0, func(tx *sql.Tx, _, _ int64) error {
		_, err := tx.ExecContext(ctx, l.d.q(`INSERT INTO xa_log_heuristics (log_id, rm, xid, time_us, rec) VALUES (?, ?, ?, ?, ?)`),
			l.id, h.RM, h.XID.String(), h.Time.UnixMicro(), b)
		return err
	})
}

// ClearHeuristic drops the heuristic records of branch x on participant
// rm, durably.
func (l *Log) ClearHeuristic(ctx context.Context, rm string, x xa.XID) error {
	if err := l.usable(); err != nil {
		return err
	}
	return l.writeTx(ctx, "clear heuristic", 0, func(tx *sql.Tx, _, _ int64) error {
		_, err := tx.ExecContext(ctx, l.d.q(`DELETE FROM xa_log_heuristics WHERE log_id = ? AND rm = ? AND xid = ?`), l.id, rm, x.String())
		return err
	})
}

// Lookup returns the commit record of id, if any.
func (l *Log) Lookup(ctx context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	var b []byte
	err := l.db.QueryRowContext(ctx, l.d.q(`SELECT rec FROM xa_log_decisions WHERE log_id = ? AND gid = ? AND kind = 'C'`), l.id, id.String()).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return xa.CommitRecord{}, false, nil
	}
	if err != nil {
		return xa.CommitRecord{}, false, fmt.Errorf("sqllog: lookup %v: %w", id, err)
	}
	var rec xa.CommitRecord
	if err := rec.UnmarshalBinary(b); err != nil {
		return xa.CommitRecord{}, false, fmt.Errorf("sqllog: the commit record of %v: %w", id, err)
	}
	if l.b.isForgotten(id.String()) {
		return xa.CommitRecord{}, false, nil
	}
	return rec, true, nil
}

// Commits returns every commit record not yet forgotten, oldest (by its
// Logged time) first.
func (l *Log) Commits(ctx context.Context) ([]xa.CommitRecord, error) {
	rows, err := l.db.QueryContext(ctx, l.d.q(`SELECT rec FROM xa_log_decisions WHERE log_id = ? AND kind = 'C' ORDER BY logged_us, gid`), l.id)
	if err != nil {
		return nil, fmt.Errorf("sqllog: reading commit records: %w", err)
	}
	defer rows.Close()
	var out []xa.CommitRecord
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("sqllog: reading commit records: %w", err)
		}
		var rec xa.CommitRecord
		if err := rec.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("sqllog: a commit record: %w", err)
		}
		if !l.b.isForgotten(rec.ID.String()) {
			out = append(out, rec)
		}
	}
	return out, rows.Err()
}

// LookupAbort reports whether an abort record exists for id.
func (l *Log) LookupAbort(ctx context.Context, id xa.GlobalID) (xa.AbortRecord, bool, error) {
	var logged int64
	var reason string
	err := l.db.QueryRowContext(ctx, l.d.q(`SELECT logged_us, reason FROM xa_log_decisions WHERE log_id = ? AND gid = ? AND kind = 'A'`),
		l.id, id.String()).Scan(&logged, &reason)
	if errors.Is(err, sql.ErrNoRows) {
		return xa.AbortRecord{}, false, nil
	}
	if err != nil {
		return xa.AbortRecord{}, false, fmt.Errorf("sqllog: lookup abort %v: %w", id, err)
	}
	return xa.AbortRecord{ID: id, Logged: time.UnixMicro(logged), Reason: reason}, true, nil
}

// Aborts returns every abort record not yet forgotten, oldest first.
func (l *Log) Aborts(ctx context.Context) ([]xa.AbortRecord, error) {
	rows, err := l.db.QueryContext(ctx, l.d.q(`SELECT gid, logged_us, reason FROM xa_log_decisions WHERE log_id = ? AND kind = 'A' ORDER BY logged_us, gid`), l.id)
	if err != nil {
		return nil, fmt.Errorf("sqllog: reading abort records: %w", err)
	}
	defer rows.Close()
	var out []xa.AbortRecord
	for rows.Next() {
		var gid, reason string
		var logged int64
		if err := rows.Scan(&gid, &logged, &reason); err != nil {
			return nil, fmt.Errorf("sqllog: reading abort records: %w", err)
		}
		id, ok := xa.ParseGlobalIDString(gid)
		if !ok {
			return nil, fmt.Errorf("sqllog: an abort record names %q, not a global id", gid)
		}
		out = append(out, xa.AbortRecord{ID: id, Logged: time.UnixMicro(logged), Reason: reason})
	}
	return out, rows.Err()
}

// Delegations returns the log's delegations, by participant.
func (l *Log) Delegations(ctx context.Context) ([]xa.Delegation, error) {
	rows, err := l.db.QueryContext(ctx, l.d.q(`SELECT participant, tbl, table_id, logged_us FROM xa_log_delegations WHERE log_id = ? ORDER BY participant`), l.id)
	if err != nil {
		return nil, fmt.Errorf("sqllog: reading delegations: %w", err)
	}
	defer rows.Close()
	var out []xa.Delegation
	for rows.Next() {
		var d xa.Delegation
		var logged int64
		if err := rows.Scan(&d.Participant, &d.Table, &d.TableID, &logged); err != nil {
			return nil, fmt.Errorf("sqllog: reading delegations: %w", err)
		}
		d.Logged = time.UnixMicro(logged)
		out = append(out, d)
	}
	return out, rows.Err()
}

// Participants returns the participant records, by name.
func (l *Log) Participants(ctx context.Context) ([]xa.ParticipantRecord, error) {
	rows, err := l.db.QueryContext(ctx, l.d.q(`SELECT name, store_id, store_where, logged_us FROM xa_log_participants WHERE log_id = ? ORDER BY name`), l.id)
	if err != nil {
		return nil, fmt.Errorf("sqllog: reading participant records: %w", err)
	}
	defer rows.Close()
	var out []xa.ParticipantRecord
	for rows.Next() {
		var p xa.ParticipantRecord
		var logged int64
		if err := rows.Scan(&p.Name, &p.Identity.ID, &p.Identity.Where, &logged); err != nil {
			return nil, fmt.Errorf("sqllog: reading participant records: %w", err)
		}
		p.Logged = time.UnixMicro(logged)
		out = append(out, p)
	}
	return out, rows.Err()
}

// Heuristics returns the heuristic records not cleared, oldest first.
func (l *Log) Heuristics(ctx context.Context) ([]xa.HeuristicRecord, error) {
	rows, err := l.db.QueryContext(ctx, l.d.q(`SELECT rec FROM xa_log_heuristics WHERE log_id = ? ORDER BY time_us, seq`), l.id)
	if err != nil {
		return nil, fmt.Errorf("sqllog: reading heuristic records: %w", err)
	}
	defer rows.Close()
	var out []xa.HeuristicRecord
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, fmt.Errorf("sqllog: reading heuristic records: %w", err)
		}
		var h xa.HeuristicRecord
		if err := h.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("sqllog: a heuristic record: %w", err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}
