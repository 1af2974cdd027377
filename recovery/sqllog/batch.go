package sqllog

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadb/xa/xa"
)

// batcher is the owner's group commit: LogCommit queues its record and
// waits; one dispatcher takes everything queued into one database
// transaction (a batch) as soon as one of Options.Pipeline slots is free,
// so that the next batch is built while the previous ones commit. Forgets
// ride along with the next batch, or go in a batch of their own when no
// commit comes for a while.
type batcher struct {
	l *Log

	mu      sync.Mutex
	queue   []*pending
	forgets []string
	// forgotten are the forgets queued or in flight: reads leave their
	// records out, as if deleted already.
	forgotten map[string]int
	closed    bool

	wake  chan struct{} // capacity 1
	slots chan struct{} // capacity Options.Pipeline: batches in flight
	stop  chan struct{}
	done  chan struct{}

	batches, records atomic.Int64
	inflight         atomic.Int64
	maxInflight      atomic.Int64
	// The last batch answered: its callers, and how long it took (ns).
	lastSize, lastTook atomic.Int64
}

// linger waits a little, before a batch is taken, for the callers the
// last batch answered to queue their next decisions, when it answered
// several (concurrent callers usually come back at once): one commit for
// them all instead of one for those already queued and another for the
// rest. It waits at most a quarter of the last batch's time, between 100
// µs and 2 ms, and not at all after a batch of one (a lone caller).
func (b *batcher) linger() {
	want := int(b.lastSize.Load())
	if want <= 1 {
		return
	}
	d := min(max(time.Duration(b.lastTook.Load())/4, 100*time.Microsecond), 2*time.Millisecond)
	deadline := time.Now().Add(d)
	for {
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		left := time.Until(deadline)
		if n >= want || left <= 0 {
			return
		}
		t := time.NewTimer(left)
		select {
		case <-b.wake:
		case <-b.stop:
			t.Stop()
			return
		case <-t.C:
		}
		t.Stop()
	}
}

// pending is one LogCommit waiting for its batch.
type pending struct {
	rec     xa.CommitRecord
	gid     string
	payload []byte
	done    chan error // capacity 1
}

// forgetDelay is how long forgets wait for a commit batch to ride with.
const forgetDelay = 20 * time.Millisecond

func newBatcher(l *Log) *batcher {
	b := &batcher{l: l, wake: make(chan struct{}, 1), slots: make(chan struct{}, l.opts.Pipeline),
		stop: make(chan struct{}), done: make(chan struct{}), forgotten: map[string]int{}}
	go b.run()
	return b
}

func (b *batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// commit queues rec and waits for its batch.
func (b *batcher) commit(ctx context.Context, rec xa.CommitRecord, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqllog: commit %v not logged: %w", rec.ID, err)
	}
	p := &pending{rec: rec, gid: rec.ID.String(), payload: payload, done: make(chan error, 1)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	b.signal()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		// Taken into a batch or not, it may still be written.
		return unknown("sqllog: log commit "+p.gid, ctx.Err())
	}
}

// forget queues a forget.
func (b *batcher) forget(gid string) {
	b.mu.Lock()
	b.forgets = append(b.forgets, gid)
	b.forgotten[gid]++
	first := len(b.forgets) == 1 && len(b.queue) == 0
	b.mu.Unlock()
	if first {
		time.AfterFunc(forgetDelay, b.signal)
	}
}

// close stops taking records, writes what is queued, and waits for the
// batches in flight.
func (b *batcher) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	<-b.done
}

func (b *batcher) run() {
	defer close(b.done)
	for {
		stopping := false
		select {
		case <-b.wake:
		case <-b.stop:
			stopping = true
		}
		for {
			// A slot first: what queues while every slot is busy joins
			// the next batch.
			b.slots <- struct{}{}
			b.linger()
			b.mu.Lock()
			n := min(len(b.queue), b.l.opts.MaxBatch)
			batch := b.queue[:n:n]
			b.queue = b.queue[n:]
			var forgets []string
			if n > 0 || len(b.forgets) > 0 {
				k := min(len(b.forgets), 2*b.l.opts.MaxBatch)
				forgets = b.forgets[:k:k]
				b.forgets = b.forgets[k:]
			}
			more := len(b.queue) > 0 || len(b.forgets) > 0
			b.mu.Unlock()
			if len(batch) == 0 && len(forgets) == 0 {
				<-b.slots
				break
			}
			b.note(1)
			go func() {
				b.write(batch, forgets)
				b.note(-1)
				<-b.slots
				b.signal()
			}()
			if !more {
				break
			}
		}
		if stopping {
			// Wait for the batches in flight.
			for range cap(b.slots) {
				b.slots <- struct{}{}
			}
			return
		}
	}
}

func (b *batcher) note(d int64) {
	n := b.inflight.Add(d)
	for {
		m := b.maxInflight.Load()
		if n <= m || b.maxInflight.CompareAndSwap(m, n) {
			return
		}
	}
}

// item is one record of a batch, as the statement reads it (JSON).
type item struct {
	G string `json:"g"` // global id
	B int64  `json:"b"` // begun, µs (the node's clock)
	D int64  `json:"d"` // deadline, µs (the database's clock)
	L int64  `json:"l"` // logged, µs
	R []byte `json:"r"` // the record (base64 in JSON)
}

// outcome is what a batch did with each global id.
type outcome struct {
	fenced   bool             // the log's epoch moved on: nothing was written
	epochNow int64            // the log's epoch when fenced, if known
	inserted map[string]bool  // written by this batch
	kinds    map[string]byte  // for the others: 'C' (a commit record there already), 'A' (an abort), 0 (none: too late)
	now      int64            // the database's clock, µs, when known
	failed   error            // the batch failed: outcome unknown, or not written (then notWritten)
	deadline map[string]int64 // per global id
}

// write runs one batch and answers its callers.
func (b *batcher) write(batch []*pending, forgets []string) {
	l := b.l
	start := time.Now()
	epoch, herr := l.holding("log commit")
	// Dedupe: one row per global id (a retried LogCommit of the same id).
	var items []item
	seen := map[string]bool{}
	dl := map[string]int64{}
	for _, p := range batch {
		if seen[p.gid] {
			continue
		}
		seen[p.gid] = true
		d := l.deadline(p.rec.ID.Begun)
		dl[p.gid] = d
		items = append(items, item{G: p.gid, B: p.rec.ID.Begun.UnixMicro(), D: d, L: p.rec.Logged.UnixMicro(), R: p.payload})
	}
	var out outcome
	if herr != nil && len(items) > 0 {
		out.failed = herr
		items = nil
	}
	var err error
	for attempt := 1; len(items) > 0 || len(forgets) > 0; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.WriteTimeout)
		if l.d == Postgres {
			out, err = b.writePostgres(ctx, epoch, items, forgets)
		} else {
			out, err = b.writeMySQL(ctx, epoch, items, forgets)
		}
		cancel()
		var nw notWritten
		if err == nil || !errors.As(err, &nw) || attempt == 5 {
			break
		}
		// A deadlock or a lost connection before the commit: nothing was
		// written; write it again.
		l.opts.Logger.Info("a group-commit batch was refused by the database before its commit; writing it again", "attempt", attempt, "err", err)
		time.Sleep(time.Duration(attempt) * 5 * time.Millisecond)
	}
	if herr != nil && len(batch) > 0 {
		out.failed = herr
	} else if err != nil {
		out.failed = err
	}
	out.deadline = dl
	if len(batch) > 0 {
		b.batches.Add(1)
		b.records.Add(int64(len(batch)))
		b.lastSize.Store(int64(len(batch)))
		b.lastTook.Store(int64(time.Since(start)))
	}
	if out.fenced && out.failed == nil {
		l.noteLost(epoch, out.epochNow)
	}
	for _, p := range batch {
		p.done <- b.answer(p, out, epoch)
	}
	if len(forgets) > 0 {
		b.mu.Lock()
		for _, g := range forgets {
			if b.forgotten[g]--; b.forgotten[g] <= 0 {
				delete(b.forgotten, g)
			}
		}
		b.mu.Unlock()
	}
	if l.opts.OnBatch != nil {
		l.opts.OnBatch(len(batch), len(forgets), time.Since(start))
	}
}

// isForgotten reports whether a forget of gid is queued or in flight.
func (b *batcher) isForgotten(gid string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.forgotten[gid] > 0
}

// answer is what LogCommit of p returns after its batch.
func (b *batcher) answer(p *pending, out outcome, epoch int64) error {
	var nw notWritten
	switch {
	case out.failed != nil && (errors.Is(out.failed, xa.ErrFenced) || errors.Is(out.failed, ErrClosed) || errors.Is(out.failed, ErrNotHolder)):
		return out.failed
	case out.failed != nil && errors.As(out.failed, &nw):
		// Refused before its commit, three times: not written, but the
		// contract has no word for that: outcome unknown is the safe one.
		return unknown("sqllog: log commit "+p.gid, out.failed)
	case out.failed != nil:
		return unknown("sqllog: log commit "+p.gid, out.failed)
	case out.fenced:
		return fenced("log commit "+p.gid, epoch, out.epochNow)
	case out.inserted[p.gid]:
		return nil
	}
	switch out.kinds[p.gid] {
	case 'C':
		return nil // logged already (the same decision, written again)
	case 'A':
		return fmt.Errorf("sqllog: commit %s refused: %w", p.gid, xa.ErrAbortRecorded)
	}
	begun := p.rec.ID.Begun
	return fmt.Errorf("sqllog: commit %s refused: the transaction began at %s (the node's clock), its timeout of %v passed at %s "+
		"by the database's clock, which says %s: %w", p.gid, begun.UTC().Format(time.RFC3339Nano), b.l.ident.Timeout,
		time.UnixMicro(out.deadline[p.gid]).UTC().Format(time.RFC3339Nano), time.UnixMicro(out.now).UTC().Format(time.RFC3339Nano), xa.ErrDecisionTooLate)
}

// notWritten wraps an error that certainly left nothing written (the
// database refused a statement before the commit): the batch may be
// written again.
type notWritten struct{ err error }

func (e notWritten) Error() string { return e.err.Error() }
func (e notWritten) Unwrap() error { return e.err }

// pgBatch is PostgreSQL's batch: one statement, so one implicit
// transaction and one round trip. Its CTEs force synchronous_commit on
// for the commit (read at commit time), lock the log's row (FOR SHARE)
// only if it still has this process's epoch, and insert the records only
// then and only those whose deadline has not passed by the database's
// clock; a decision row of the same log and global id (an abort) makes the
// insert skip it. Forgets are deleted in the same statement.
const pgBatch = `WITH t AS (SELECT COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) AS now, ` + syncOnExpr + ` AS sc),
f AS (SELECT epoch FROM xa_log_logs WHERE log_id = $1 AND epoch = $2 FOR SHARE),
j AS (SELECT * FROM json_to_recordset($3::json) AS x(g text, b bigint, d bigint, l bigint, r text)),
ins AS (INSERT INTO xa_log_decisions (log_id, gid, kind, epoch, logged_us, begun_us, keep_us, reason, rec)
	SELECT $1, j.g, 'C', f.epoch, j.l, j.b, 0, '', decode(j.r, 'base64') FROM j, f, t WHERE j.d >= t.now
	ON CONFLICT (log_id, gid) DO NOTHING RETURNING gid),
del AS (DELETE FROM xa_log_decisions WHERE log_id = $1 AND gid = ANY(ARRAY(SELECT json_array_elements_text($5::json))) AND kind = 'C')
SELECT (SELECT count(*) FROM f), (SELECT now FROM t), (SELECT sc FROM t), COALESCE((SELECT json_agg(gid) FROM ins)::text, '[]')`

func (b *batcher) writePostgres(ctx context.Context, epoch int64, items []item, forgets []string) (outcome, error) {
	l := b.l
	out := outcome{inserted: map[string]bool{}, kinds: map[string]byte{}}
	if len(items) == 0 {
		// Not durable (a forget need not be): no wait for the flush.
		_, err := l.db.ExecContext(ctx, `WITH d AS (DELETE FROM xa_log_decisions WHERE log_id = $1 AND gid = ANY(ARRAY(SELECT json_array_elements_text($2::json))) AND kind = 'C')
			SELECT set_config('synchronous_commit', 'off', true)`, l.id, jsonText(forgets))
		return out, err
	}
	js, err := json.Marshal(items)
	if err != nil {
		return out, err
	}
	var nf int64
	var sc, ins string
	err = l.db.QueryRowContext(ctx, pgBatch, l.id, epoch, string(js), l.s.dbNow(), jsonText(forgets)).Scan(&nf, &out.now, &sc, &ins)
	if err != nil {
		if serverRefused(err) {
			return out, notWritten{err}
		}
		return out, err
	}
	if nf == 0 {
		out.fenced = true
		var cur int64
		if err := l.db.QueryRowContext(ctx, `SELECT epoch FROM xa_log_logs WHERE log_id = $1`, l.id).Scan(&cur); err == nil {
			out.epochNow = cur
		}
		return out, nil
	}
	var got []string
	if err := json.Unmarshal([]byte(ins), &got); err != nil {
		return out, fmt.Errorf("sqllog: reading the batch's answer: %w", err)
	}
	for _, g := range got {
		out.inserted[g] = true
	}
	if len(got) < len(items) {
		// The others were refused: by a decision row there (read now, in
		// a new snapshot that sees rows the insert waited for), or by
		// their deadline.
		var rest []string
		for _, it := range items {
			if !out.inserted[it.G] {
				rest = append(rest, it.G)
			}
		}
		rows, err := l.db.QueryContext(ctx, `SELECT gid, kind FROM xa_log_decisions WHERE log_id = $1 AND gid = ANY(ARRAY(SELECT json_array_elements_text($2::json)))`,
			l.id, jsonText(rest))
		if err != nil {
			return out, fmt.Errorf("sqllog: reading the decisions that refused records: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var g, k string
			if err := rows.Scan(&g, &k); err != nil {
				return out, err
			}
			out.kinds[g] = k[0]
		}
		if err := rows.Err(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// MySQL's batch is a transaction: a shared lock on the log's row, taken
// only if the row still has this process's epoch (else nothing is
// written); the records inserted, but those whose deadline has passed by
// the database's clock or that meet a decision row of the same log and
// global id; the forgets deleted; the refused ones read; commit.
const (
	myFence  = `SELECT epoch FROM xa_log_logs WHERE log_id = ? LOCK IN SHARE MODE`
	myInsert = `INSERT INTO xa_log_decisions (log_id, gid, kind, epoch, logged_us, begun_us, keep_us, reason, rec)
	SELECT ?, j.g, 'C', ?, j.l, j.b, 0, '', FROM_BASE64(j.r)
	FROM JSON_TABLE(?, '$[*]' COLUMNS (g VARCHAR(64) PATH '$.g', b BIGINT PATH '$.b', d BIGINT PATH '$.d', l BIGINT PATH '$.l', r LONGTEXT PATH '$.r')) AS j
	WHERE j.d >= COALESCE(?, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)))
	AND EXISTS (SELECT 1 FROM xa_log_logs g WHERE g.log_id = ? AND g.epoch = ?)
	ON DUPLICATE KEY UPDATE log_id = log_id`
)

// myIn returns the statement with its "IN ()" given n placeholders, and
// the arguments: the log id, then the global ids. Point lookups on the
// primary key lock those rows only (a subquery made InnoDB lock ranges,
// and concurrent batches deadlocked).
func myIn(stmt, logID string, gids []string) (string, []any) {
	args := make([]any, 0, 1+len(gids))
	args = append(args, logID)
	for _, g := range gids {
		args = append(args, g)
	}
	return strings.Replace(stmt, "IN ()", "IN (?"+strings.Repeat(", ?", len(gids)-1)+")", 1), args
}

const (
	myDelete = `DELETE FROM xa_log_decisions WHERE log_id = ? AND kind = 'C' AND gid IN ()`
	myKinds  = `SELECT gid, kind FROM xa_log_decisions WHERE log_id = ? AND gid IN () LOCK IN SHARE MODE`
)

func (b *batcher) writeMySQL(ctx context.Context, epoch int64, items []item, forgets []string) (outcome, error) {
	l := b.l
	out := outcome{inserted: map[string]bool{}, kinds: map[string]byte{}}
	if len(items) == 0 {
		q, args := myIn(myDelete, l.id, forgets)
		_, err := l.db.ExecContext(ctx, q, args...)
		return out, err
	}
	js, err := json.Marshal(items)
	if err != nil {
		return out, err
	}
	if l.s.multiStatements(ctx) {
		return b.writeMySQLOneTrip(ctx, epoch, items, forgets, string(js))
	}
	tx, err := l.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return out, notWritten{err}
	}
	defer tx.Rollback() //nolint:errcheck
	var cur int64
	if err := tx.QueryRowContext(ctx, myFence, l.id).Scan(&cur); err != nil {
		return out, notWritten{err}
	}
	if cur != epoch {
		out.fenced, out.epochNow = true, cur
		return out, nil
	}
	res, err := tx.ExecContext(ctx, myInsert, l.id, epoch, string(js), l.s.dbNow(), l.id, epoch)
	if err != nil {
		return out, notWritten{err}
	}
	n, err := res.RowsAffected()
	if err != nil {
		return out, notWritten{err}
	}
	if len(forgets) > 0 {
		q, args := myIn(myDelete, l.id, forgets)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return out, notWritten{err}
		}
	}
	all := int(n) == len(items)
	if !all {
		gids := make([]string, len(items))
		for i, it := range items {
			gids[i] = it.G
		}
		q, args := myIn(myKinds, l.id, gids)
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return out, notWritten{err}
		}
		// Within the transaction, a row of ours is one this batch wrote
		// with its epoch; told apart from an older commit row below.
		for rows.Next() {
			var g, k string
			if err := rows.Scan(&g, &k); err != nil {
				rows.Close()
				return out, notWritten{err}
			}
			out.kinds[g] = k[0]
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, notWritten{err}
		}
		if err := tx.QueryRowContext(ctx, `SELECT `+l.d.now("?"), l.s.dbNow()).Scan(&out.now); err != nil {
			return out, notWritten{err}
		}
	}
	if err := tx.Commit(); err != nil {
		return out, err
	}
	for _, it := range items {
		if all || out.kinds[it.G] == 'C' {
			// Written now, or (a duplicate) before: logged either way.
			out.inserted[it.G] = true
		}
	}
	return out, nil
}

// jsonText is a JSON array of strings.
func jsonText(ss []string) string {
	if len(ss) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(ss)
	return string(b)
}

// Stats are the group commit's counts so far.
type Stats struct {
	Batches, Records int64
	// MaxInflight is the most batches that were in flight at once.
	MaxInflight int64
}

// Stats returns the group commit's counts (zero for a log that is not its
// node's own).
func (l *Log) Stats() Stats {
	if l.b == nil {
		return Stats{}
	}
	return Stats{Batches: l.b.batches.Load(), Records: l.b.records.Load(), MaxInflight: l.b.maxInflight.Load()}
}

// SyncCount returns how many group-commit batches (database commits) the
// log has written: the decision log benchmark's syncs.
func (l *Log) SyncCount() int64 { return l.Stats().Batches }

// writeMySQLOneTrip is MySQL's batch in one round trip (the connection
// runs several statements per query): the server runs the whole
// transaction — lock the log's row, insert where the epoch still holds and
// the deadline has not passed, delete the forgets, read what the rows say,
// commit — whatever the client does meanwhile, so that a client paused
// mid-batch holds no lock.
func (b *batcher) writeMySQLOneTrip(ctx context.Context, epoch int64, items []item, forgets []string, js string) (outcome, error) {
	l := b.l
	out := outcome{inserted: map[string]bool{}, kinds: map[string]byte{}}
	gids := make([]string, len(items))
	for i, it := range items {
		gids[i] = it.G
	}
	var q strings.Builder
	args := []any{}
	q.WriteString("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; ")
	q.WriteString("SELECT epoch, " + l.d.now("?") + " FROM xa_log_logs WHERE log_id = ? LOCK IN SHARE MODE; ")
	args = append(args, l.s.dbNow(), l.id)
	q.WriteString(myInsert + "; ")
	args = append(args, l.id, epoch, js, l.s.dbNow(), l.id, epoch)
	if len(forgets) > 0 {
		dq, dargs := myIn(myDelete, l.id, forgets)
		q.WriteString(dq + "; ")
		args = append(args, dargs...)
	}
	kq, kargs := myIn(`SELECT gid, kind FROM xa_log_decisions WHERE log_id = ? AND gid IN ()`, l.id, gids)
	q.WriteString(kq + "; COMMIT")
	args = append(args, kargs...)

	conn, err := l.db.Conn(ctx)
	if err != nil {
		return out, notWritten{err}
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, q.String(), args...)
	readKinds := false // the last result before COMMIT's was read
	var cur int64
	sets := 0
	if err == nil {
		for {
			cols, cerr := rows.Columns()
			if cerr == nil && len(cols) == 2 {
				sets++
				for rows.Next() {
					if sets == 1 {
						if err := rows.Scan(&cur, &out.now); err != nil {
							break
						}
						continue
					}
					var g, k string
					if err := rows.Scan(&g, &k); err != nil {
						break
					}
					out.kinds[g] = k[0]
				}
				if sets == 2 {
					readKinds = true
				}
			}
			if !rows.NextResultSet() {
				break
			}
		}
		err = rows.Err()
		rows.Close()
	}
	if err != nil {
		// The server stops at the first failed statement, leaving the
		// transaction open: roll it back on this connection. Before the
		// commit's turn, nothing was written; at it, nobody knows.
		_, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		if rerr != nil {
			conn.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck // discard the connection
		}
		if readKinds || rerr != nil {
			return out, err
		}
		return out, notWritten{err}
	}
	if sets != 2 {
		return out, fmt.Errorf("sqllog: the batch answered %d result sets with rows, want 2", sets)
	}
	if cur != epoch {
		out.fenced, out.epochNow = true, cur
		return out, nil
	}
	for _, it := range items {
		if out.kinds[it.G] == 'C' {
			// Written now, or (a duplicate) before: logged either way.
			out.inserted[it.G] = true
		}
	}
	return out, nil
}

// multiStatements reports whether the MySQL connections run several
// statements per query (go-sql-driver/mysql's multiStatements, which
// internal/logdb sets); it asks once.
func (s *Store) multiStatements(ctx context.Context) bool {
	if v := s.multi.Load(); v != 0 {
		return v > 0
	}
	rows, err := s.db.QueryContext(ctx, "SELECT 1; SELECT 2")
	ok := err == nil
	if ok {
		for rows.NextResultSet() {
		}
		ok = rows.Err() == nil
		rows.Close()
	}
	if ok {
		s.multi.Store(1)
	} else {
		s.multi.Store(-1)
		s.opts.Logger.Warn("the MySQL log database's connections run one statement per query: a group-commit batch takes five round trips "+
			"(open it with multiStatements=true, as internal/logdb does)", "err", err)
	}
	return ok
}
