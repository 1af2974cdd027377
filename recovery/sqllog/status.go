package sqllog

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// Lease states.
const (
	// StateHeld: a process holds the lease and it has not expired.
	StateHeld = "held"
	// StateExpired: its holder stopped renewing it (dead, paused, cut
	// off) and its expiry passed, by the database's clock.
	StateExpired = "expired"
	// StateFree: released (or never taken).
	StateFree = "free"
)

// LogStatus is one log of the store, with its lease, as the database says
// now.
type LogStatus struct {
	Identity xa.LogIdentity
	// Epoch is the log's epoch: the one decision writes must carry.
	Epoch int64
	// Holder holds (or held) the lease at LeaseEpoch; Kind is how it took
	// it: own (its node), takeover (a live node, for a dead one), manual
	// (an operator), none (never taken).
	Holder     string
	LeaseEpoch int64
	Kind       string
	State      string
	// Clean: released with nothing of the log left in doubt.
	Clean bool
	TTL   time.Duration
	// ExpiresIn is how long until the lease expires (negative: since it
	// expired); RenewedAgo and AcquiredAgo are how long ago it was
	// renewed and taken; all by the database's clock.
	ExpiresIn, RenewedAgo, AcquiredAgo time.Duration
	// NodeOffset is the database's clock minus the log's node's, as the
	// node measured it last.
	NodeOffset time.Duration
	// Commits and Aborts count the log's decision records.
	Commits, Aborts int
}

// Logs returns every log of the store, by node.
func (s *Store) Logs(ctx context.Context) ([]LogStatus, error) {
	if err := s.checkVersion(ctx); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.d.q(`SELECT g.identity, g.epoch, e.holder, e.epoch, e.kind, e.ttl_us, e.expires_us, e.acquired_us, e.renewed_us, e.clean,
		e.node_offset_us, `+s.d.now("?")+`,
		(SELECT count(*) FROM xa_log_decisions d WHERE d.log_id = g.log_id AND d.kind = 'C'),
		(SELECT count(*) FROM xa_log_decisions d WHERE d.log_id = g.log_id AND d.kind = 'A')
		FROM xa_log_logs g JOIN xa_log_leases e ON e.log_id = g.log_id ORDER BY g.node`), s.dbNow())
	if err != nil {
		return nil, fmt.Errorf("sqllog: listing the logs: %w", err)
	}
	defer rows.Close()
	var out []LogStatus
	for rows.Next() {
		var st LogStatus
		var b []byte
		var ttl, exp, acq, ren, off, now int64
		if err := rows.Scan(&b, &st.Epoch, &st.Holder, &st.LeaseEpoch, &st.Kind, &ttl, &exp, &acq, &ren, &st.Clean, &off, &now, &st.Commits, &st.Aborts); err != nil {
			return nil, fmt.Errorf("sqllog: listing the logs: %w", err)
		}
		if err := st.Identity.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("sqllog: a log's identity: %w", err)
		}
		us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
		st.TTL, st.ExpiresIn, st.RenewedAgo, st.AcquiredAgo, st.NodeOffset = us(ttl), us(exp-now), us(now-ren), us(now-acq), us(off)
		r := leaseRow{holder: st.Holder, expires: exp, now: now}
		r.judge()
		switch {
		case r.heldAlive:
			st.State = StateHeld
		case r.expired:
			st.State = StateExpired
		default:
			st.State = StateFree
		}
		out = append(out, st)
	}
	return out, rows.Err()
}

// Event is one lease event of a log (or its creation).
type Event struct {
	Node   string
	At     time.Time // by the database's clock
	Action string    // init, acquire, takeover, release
	Epoch  int64
	Holder string
	// Previous held the lease before (at PreviousEpoch).
	Previous      string
	PreviousEpoch int64
	Reason        string
}

// Events returns the lease events of node's log (every log's when node is
// ""), oldest first, the last limit of them (all when limit <= 0).
func (s *Store) Events(ctx context.Context, node string, limit int) ([]Event, error) {
	if err := s.checkVersion(ctx); err != nil {
		return nil, err
	}
	q := `SELECT g.node, v.at_us, v.action, v.epoch, v.holder, v.prev_holder, v.prev_epoch, v.reason
		FROM xa_log_events v JOIN xa_log_logs g ON g.log_id = v.log_id`
	var args []any
	if node != "" {
		q += ` WHERE g.node = ?`
		args = append(args, node)
	}
	q += ` ORDER BY v.seq DESC`
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	rows, err := s.db.QueryContext(ctx, s.d.q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("sqllog: reading lease events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var at int64
		if err := rows.Scan(&e.Node, &at, &e.Action, &e.Epoch, &e.Holder, &e.Previous, &e.PreviousEpoch, &e.Reason); err != nil {
			return nil, fmt.Errorf("sqllog: reading lease events: %w", err)
		}
		e.At = time.UnixMicro(at)
		out = append(out, e)
	}
	slices.Reverse(out)
	return out, rows.Err()
}

// Peers returns the store as the logs a node takes over when their nodes
// die (recovery.Takeover): every log but self's, or only those of nodes
// when nodes is not empty.
func (s *Store) Peers(self string, nodes []string) recovery.LeaseStore {
	return peers{s: s, self: self, nodes: nodes}
}

type peers struct {
	s     *Store
	self  string
	nodes []string
}

// Expired returns the peers' logs whose lease expired, or was released
// with work possibly left, or released clean more than
// Options.RescanReleased ago.
func (p peers) Expired(ctx context.Context) ([]recovery.ExpiredLease, error) {
	logs, err := p.s.Logs(ctx)
	if err != nil {
		return nil, err
	}
	var out []recovery.ExpiredLease
	for _, st := range logs {
		n := st.Identity.Node
		if n == p.self || len(p.nodes) > 0 && !slices.Contains(p.nodes, n) {
			continue
		}
		switch {
		case st.State == StateExpired:
			out = append(out, recovery.ExpiredLease{Log: st.Identity.ID, Node: n, Holder: st.Holder, Epoch: st.LeaseEpoch, Since: -st.ExpiresIn})
		case st.State == StateFree && !st.Clean:
			out = append(out, recovery.ExpiredLease{Log: st.Identity.ID, Node: n, Holder: st.Holder, Epoch: st.LeaseEpoch, Released: true, Since: -st.ExpiresIn})
		case st.State == StateFree && p.s.opts.RescanReleased > 0 && -st.ExpiresIn >= p.s.opts.RescanReleased:
			// Released clean a while ago: looked at again (Options.RescanReleased).
			out = append(out, recovery.ExpiredLease{Log: st.Identity.ID, Node: n, Holder: st.Holder, Epoch: st.LeaseEpoch, Released: true, Rescan: true, Since: -st.ExpiresIn})
		}
	}
	return out, nil
}

// TakeOver takes the log over (Store.TakeOver).
func (p peers) TakeOver(ctx context.Context, log xa.LogID, reason string) (recovery.TakenLog, error) {
	l, err := p.s.TakeOver(ctx, log, TakeoverOptions{Reason: reason})
	if err != nil {
		return nil, err
	}
	return l, nil
}
