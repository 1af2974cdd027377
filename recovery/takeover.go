package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/xadb/xa/xa"
)

// LeaseStore is a store of decision logs held under leases, one per node
// (recovery/sqllog's Store), as a process that takes dead nodes' logs over
// sees it (docs/protocol.md, "Leases, epochs, takeover").
type LeaseStore interface {
	// Expired returns the logs this process may take over now: their
	// lease expired by the store's clock, or was released with work
	// possibly left (a node that stopped). Never this process's own.
	Expired(ctx context.Context) ([]ExpiredLease, error)
	// TakeOver takes the lease of log over at a new epoch if the store,
	// by its clock, still finds it expired or released; from then on the
	// store refuses every decision of the log's previous holders. reason
	// is recorded with it.
	TakeOver(ctx context.Context, log xa.LogID, reason string) (TakenLog, error)
}

// ExpiredLease is a log whose lease may be taken over.
type ExpiredLease struct {
	Log  xa.LogID
	Node string
	// Holder held it last ("" when it was released) at Epoch.
	Holder string
	Epoch  int64
	// Released: it was released (its node stopped), not left to expire.
	Released bool
	// Rescan: it was released clean, a while ago, and is looked at again
	// for a branch prepared after the release by a process of its node
	// that was paused past its lease (recovery/sqllog's RescanReleased).
	Rescan bool
	// Since is how long ago it expired or was released, by the store's
	// clock.
	Since time.Duration
}

// TakenLog is a log taken over: recovery with it presumes abort at once
// (it implements Leased: PresumeNow), and it keeps its lease renewed until
// Release or Close.
type TakenLog interface {
	xa.RecoveryLog
	// Release gives the lease up; clean says nothing of the log is left
	// in doubt, so that live nodes leave it alone until its node is back.
	Release(ctx context.Context, clean bool) error
	// Close releases the lease (not clean) if Release did not, and the
	// log.
	Close() error
}

// TakeoverConfig configures a Takeover.
type TakeoverConfig struct {
	// Store is where the logs and their leases are.
	Store LeaseStore
	// Participants are the databases to recover the logs' branches on:
	// the same, under the same names, as the logs' nodes used (the nodes
	// are replicas of one service). A log recorded participant identities
	// for: recovery acts only where they match.
	Participants []xa.ResourceManager
	// Unreachable names participants configured but not opened, with why.
	Unreachable map[string]error
	// Interval between looks for expired leases, and between the scans
	// of a log taken over until nothing of it is in doubt. Default 1s.
	Interval time.Duration
	// Logger receives a line per takeover and per scan's action; nil
	// discards.
	Logger *slog.Logger
	// Report, if set, is told about every takeover when it ends.
	Report func(TakeoverReport)
}

// TakeoverReport says what one takeover did.
type TakeoverReport struct {
	Log  xa.LogID
	Node string
	// Previous held the lease (at PreviousEpoch) before; "" when it had
	// been released.
	Previous      string
	PreviousEpoch int64
	// ExpiredFor is how long the lease had been expired (or released)
	// when it was taken, by the store's clock.
	ExpiredFor time.Duration
	// Taken is when this process took it, by its clock.
	Taken time.Time
	// Resolved is how long, from Taken, recovery took until nothing of
	// the log was in doubt; 0 if it did not get there.
	Resolved time.Duration
	Scans    int
	// Committed and RolledBack count the branches recovery resolved;
	// Aborted the transactions whose abort it recorded.
	Committed, RolledBack, Aborted int
	// Released: the lease was released clean (nothing left in doubt).
	Released bool
	// Err is why the takeover stopped early (nil when Released).
	Err error
}

// Takeover takes over the logs of dead nodes, runs their recovery at once
// (no grace period: the store refuses their decisions since the takeover)
// until nothing of them is left in doubt, and releases them. A live
// node's log is never taken: its lease has not expired by the store's
// clock.
type Takeover struct {
	cfg TakeoverConfig
	log *slog.Logger

	mu      sync.Mutex
	running map[xa.LogID]bool
	wg      sync.WaitGroup
}

// NewTakeover checks cfg and returns a Takeover.
func NewTakeover(cfg TakeoverConfig) (*Takeover, error) {
	if cfg.Store == nil {
		return nil, errors.New("recovery: TakeoverConfig.Store is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	t := &Takeover{cfg: cfg, log: cfg.Logger, running: map[xa.LogID]bool{}}
	if t.log == nil {
		t.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return t, nil
}

// Run looks for expired leases every Interval and takes each over, its
// recovery on a goroutine of its own, until ctx ends; then it waits for
// them (each releases what it holds).
func (t *Takeover) Run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	for {
		t.pass(ctx, func(taken TakenLog, e ExpiredLease) {
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				t.finish(t.Recover(ctx, taken, e, nil))
			}()
		})
		select {
		case <-ctx.Done():
			t.wg.Wait()
			return
		case <-tick.C:
		}
	}
}

// Once takes over every log whose lease has expired (or was released)
// now, and recovers each until nothing of it is in doubt or ctx ends (xactl
// recover --takeover). Logs another process took first are left out.
func (t *Takeover) Once(ctx context.Context) ([]TakeoverReport, error) {
	var out []TakeoverReport
	var mu sync.Mutex
	var wg sync.WaitGroup
	err := t.pass(ctx, func(taken TakenLog, e ExpiredLease) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := t.Recover(ctx, taken, e, nil)
			t.finish(r)
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		}()
	})
	wg.Wait()
	return out, err
}

func (t *Takeover) finish(r TakeoverReport) {
	t.mu.Lock()
	delete(t.running, r.Log)
	t.mu.Unlock()
	if t.cfg.Report != nil {
		t.cfg.Report(r)
	}
}

// pass takes over every expired lease not being recovered already and
// hands each to start.
func (t *Takeover) pass(ctx context.Context, start func(TakenLog, ExpiredLease)) error {
	expired, err := t.cfg.Store.Expired(ctx)
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("looking for decision logs to take over", "err", err)
		}
		return err
	}
	for _, e := range expired {
		t.mu.Lock()
		busy := t.running[e.Log]
		if !busy {
			t.running[e.Log] = true
		}
		t.mu.Unlock()
		if busy {
			continue
		}
		why := "taken over by a live node to recover a dead node's branches"
		if e.Released {
			why = "taken over by a live node to recover what a stopped node may have left"
		}
		if e.Rescan {
			why = "looked at again by a live node: a paused process of its node may have prepared a branch after its clean release"
		}
		taken, err := t.cfg.Store.TakeOver(ctx, e.Log, why)
		if err != nil {
			t.mu.Lock()
			delete(t.running, e.Log)
			t.mu.Unlock()
			t.log.Info("not taking the decision log over", "node", e.Node, "log", e.Log, "err", err)
			continue
		}
		if e.Rescan {
			t.log.Info("looking at a released decision log again", "node", e.Node, "log", e.Log, "released_ago", e.Since.Round(time.Second))
		} else {
			t.log.Warn("took over a dead node's decision log; recovering its branches", "node", e.Node, "log", e.Log, "why", why)
		}
		start(taken, e)
	}
	return nil
}

// Recover scans a log taken over (e says what it was) until nothing of it
// is in doubt (no branch of it prepared, no commit record left, every
// participant answered), then releases it clean; onScan, if set, sees
// every scan's report. It stops early when ctx ends or the lease is lost
// (another process took it from this one), and then releases it unclean
// (if it still holds it). It closes taken.
func (t *Takeover) Recover(ctx context.Context, taken TakenLog, e ExpiredLease, onScan func(Report)) TakeoverReport {
	at := time.Now()
	r := TakeoverReport{Log: e.Log, Node: e.Node, Previous: e.Holder, PreviousEpoch: e.Epoch, ExpiredFor: e.Since, Taken: at}
	defer func() {
		if err := taken.Close(); err != nil && r.Err == nil && !r.Released {
			r.Err = err
		}
	}()
	node := taken.Identity().Node
	sc, err := New(Config{Participants: t.cfg.Participants, Log: taken, Nodes: []string{node}, Unreachable: t.cfg.Unreachable,
		Logger: t.log.With("takeover", node)})
	if err != nil {
		r.Err = err
		return r
	}
	for {
		rep, err := sc.Scan(ctx)
		r.Scans++
		if err == nil && onScan != nil {
			onScan(rep)
		}
		if err == nil {
			for _, b := range rep.Branches {
				if b.Done && b.Verdict == Commit {
					r.Committed++
				}
				if b.Done && b.Verdict == Rollback {
					r.RolledBack++
				}
			}
			r.Aborted += len(rep.Aborted)
			if lv := sc.presumption(ctx); lv.presume != PresumeNow {
				r.Err = fmt.Errorf("recovery: the takeover of node %s's log stopped: %s", node, lv.why)
				return r
			}
			left, lerr := taken.Commits(ctx)
			// A rescan of a log released clean (e.Rescan) looks for late
			// prepares on the participants that answer; it does not hold
			// the log through a participant's outage (its node could not
			// start meanwhile): one that could not be listed is looked at
			// by the next rescan.
			answered := len(rep.Errors) == 0 && len(rep.Unlisted) == 0 || e.Rescan
			if lerr == nil && rep.InDoubt() == 0 && answered && len(rep.Kept) == 0 && len(left) == 0 {
				r.Resolved = time.Since(at)
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err := taken.Release(rctx, true)
				cancel()
				if err != nil {
					r.Err = fmt.Errorf("recovery: releasing node %s's log after its recovery: %w", node, err)
					return r
				}
				r.Released = true
				level := slog.LevelWarn
				if e.Rescan && r.Committed+r.RolledBack+r.Aborted == 0 {
					level = slog.LevelInfo // nothing was left: the usual case
				}
				t.log.Log(ctx, level, "recovered a dead node's decision log and released it", "node", node, "log", e.Log, "resolved_in", r.Resolved.Round(time.Millisecond),
					"committed", r.Committed, "rolled_back", r.RolledBack, "scans", r.Scans)
				return r
			}
		} else {
			t.log.Warn("scanning a decision log taken over", "node", node, "err", err)
		}
		select {
		case <-ctx.Done():
			r.Err = ctx.Err()
			return r
		case <-time.After(t.cfg.Interval):
		}
	}
}
