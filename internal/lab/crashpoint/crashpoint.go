// Package crashpoint kills the process at a chosen step of the protocol,
// for crash tests and the demo: "prepare:2" right after the second branch
// prepare of the process returned, "log:1" right after the first commit
// decision became durable in the log (before any branch is told), "last:1"
// right after the first last-resource commit (the decision durable in that
// participant, the others not told), "commit:1" right after the first
// branch commit returned. The kill is SIGKILL: no deferred
// function, no flush, no goodbye to the databases — as in a real crash.
//
// The exactly-once sink opens its participants itself, so its crash point
// is on the wire: "pgcommit:3" right before the third COMMIT PREPARED
// reaches PostgreSQL through a Proxy. For a sink writing to MariaDB and
// PostgreSQL that is phase two of a decided checkpoint: its decision is
// durable, its MariaDB branch committed (branches commit in the order of
// their targets' names), its PostgreSQL branch still prepared.
package crashpoint

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/xadb/xa/xa"
)

// Points where a Trigger can fire.
var Points = []string{"prepare", "log", "last", "commit", "pgcommit"}

// Trigger fires once its point has been passed n times.
type Trigger struct {
	point string
	n     int
	mu    sync.Mutex
	seen  map[string]int
	// Kill is called when the trigger fires; by default it sends SIGKILL
	// to this process.
	Kill func()
}

// Parse parses "point:n"; "" is a trigger that never fires.
func Parse(spec string) (*Trigger, error) {
	t := &Trigger{seen: map[string]int{}, Kill: func() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }} //nolint:errcheck
	if spec == "" {
		return t, nil
	}
	p, ns, ok := strings.Cut(spec, ":")
	n, err := strconv.Atoi(ns)
	if !ok || err != nil || n < 1 {
		return nil, fmt.Errorf("crashpoint: %q: want point:n with n >= 1", spec)
	}
	valid := false
	for _, q := range Points {
		valid = valid || q == p
	}
	if !valid {
		return nil, fmt.Errorf("crashpoint: %q: point must be one of %v", spec, Points)
	}
	t.point, t.n = p, n
	return t, nil
}

// Hit records that point was passed; the trigger fires on its n-th pass.
func (t *Trigger) Hit(point string) {
	t.mu.Lock()
	t.seen[point]++
	fire := point == t.point && t.seen[point] == t.n
	t.mu.Unlock()
	if fire {
		t.Kill()
	}
}

// WrapLog returns l with the "log" point after every durable write.
func (t *Trigger) WrapLog(l xa.DecisionLog) xa.DecisionLog { return &log{l, t} }

type log struct {
	xa.DecisionLog
	t *Trigger
}

func (l *log) LogCommit(ctx context.Context, rec xa.CommitRecord) error {
	err := l.DecisionLog.LogCommit(ctx, rec)
	if err == nil {
		l.t.Hit("log")
	}
	return err
}

// WrapRM returns rm with the "prepare" and "commit" points on its
// branches. The wrapper keeps rm's name and forwards every optional
// capability of its branches.
func (t *Trigger) WrapRM(rm xa.ResourceManager) xa.ResourceManager { return &resource{rm, t} }

type resource struct {
	xa.ResourceManager
	t *Trigger
}

func (r *resource) Start(ctx context.Context, x xa.XID) (xa.Branch, error) {
	b, err := r.ResourceManager.Start(ctx, x)
	if err != nil {
		return nil, err
	}
	return &branch{b, r.t}, nil
}

// Unwrap returns the wrapped resource manager.
func (r *resource) Unwrap() xa.ResourceManager { return r.ResourceManager }

type branch struct {
	xa.Branch
	t *Trigger
}

func (b *branch) Prepare(ctx context.Context) (xa.Vote, error) {
	v, err := b.Branch.Prepare(ctx)
	if err == nil && v == xa.VotePrepared {
		b.t.Hit("prepare")
	}
	return v, err
}

func (b *branch) Commit(ctx context.Context) error {
	err := b.Branch.Commit(ctx)
	if err == nil {
		b.t.Hit("commit")
	}
	return err
}

func (b *branch) CommitOnePhase(ctx context.Context) error {
	return b.Branch.(xa.OnePhaseCommitter).CommitOnePhase(ctx)
}

func (b *branch) CanCommitLast() bool {
	lr, ok := b.Branch.(xa.LastResource)
	return ok && lr.CanCommitLast()
}

func (b *branch) CommitLast(ctx context.Context, rec xa.CommitRecord) error {
	err := b.Branch.(xa.LastResource).CommitLast(ctx, rec)
	if err == nil {
		b.t.Hit("last")
	}
	return err
}

func (b *branch) Idle() bool {
	if i, ok := b.Branch.(xa.Idler); ok {
		return i.Idle()
	}
	return false
}

func (b *branch) Origin() xa.Origin {
	if o, ok := b.Branch.(xa.OriginReporter); ok {
		return o.Origin()
	}
	return xa.Origin{}
}
