package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// participant is an open resource manager with what xactl needs of it.
type participant struct {
	cfg config.Participant
	rm  xa.ResourceManager
	// checker is the driver's start-up check.
	checker interface {
		Check(ctx context.Context) ([]xa.Finding, error)
	}
	close func()
}

// openParticipants opens every participant without running its start-up
// check (doctor runs it and reports; the other commands must work on a
// server that fails it, to clean up). A participant that cannot be opened
// is returned in errs and left out.
func openParticipants(ctx context.Context, c *config.Config, log *slog.Logger) (ps []*participant, errs []error) {
	for _, pc := range c.Participants {
		p, err := openParticipant(ctx, pc, log)
		if err != nil {
			errs = append(errs, fmt.Errorf("participant %q: %w", pc.Name, err))
			continue
		}
		ps = append(ps, p)
	}
	return ps, errs
}

func openParticipant(ctx context.Context, pc config.Participant, log *slog.Logger) (*participant, error) {
	switch pc.Driver {
	case "mysql":
		rm, err := xamysql.Open(ctx, xamysql.Config{Name: pc.Name, DSN: pc.DSN, MaxConns: pc.MaxConns, Logger: log, SkipCheck: true})
		if err != nil {
			return nil, err
		}
		return &participant{cfg: pc, rm: rm, checker: rm, close: func() { rm.Close() }}, nil
	case "postgres":
		rm, err := xapg.Open(ctx, xapg.Config{Name: pc.Name, DSN: pc.DSN, MaxConns: int32(pc.MaxConns), Logger: log, SkipCheck: true,
			DecisionTable: pc.DecisionTable})
		if err != nil {
			return nil, err
		}
		return &participant{cfg: pc, rm: rm, checker: rm, close: rm.Close}, nil
	}
	return nil, fmt.Errorf("unknown driver %q", pc.Driver)
}

func closeAll(ps []*participant) {
	for _, p := range ps {
		p.close()
	}
}

func rms(ps []*participant) []xa.ResourceManager {
	out := make([]xa.ResourceManager, len(ps))
	for i, p := range ps {
		out[i] = p.rm
	}
	return out
}

// snapshotLog is a read-only view of a decision log taken with
// filelog.Dump: it works while a transaction manager has the log open.
type snapshotLog struct {
	commits    map[string]xa.CommitRecord
	order      []string
	heuristics []xa.HeuristicRecord
}

var errReadOnly = errors.New("the decision log is open read-only")

func readSnapshot(dir string) (*snapshotLog, error) {
	if err := requireLog(dir); err != nil {
		return nil, err
	}
	s := &snapshotLog{commits: map[string]xa.CommitRecord{}}
	heur := map[string]xa.HeuristicRecord{}
	var horder []string
	err := filelog.Dump(dir, func(e filelog.Entry) error {
		switch e.Type {
		case filelog.RecordCommit:
			k := e.Commit.ID.String()
			if _, ok := s.commits[k]; !ok {
				s.order = append(s.order, k)
			}
			s.commits[k] = e.Commit
		case filelog.RecordForget:
			delete(s.commits, e.ID.String())
		case filelog.RecordHeuristic:
			k := e.Heuristic.XID.String()
			if _, ok := heur[k]; !ok {
				horder = append(horder, k)
			}
			heur[k] = e.Heuristic
		case filelog.RecordClear:
			delete(heur, e.XID.String())
		}
		return nil
	})
	if err != nil {
		return nil, corruptHint(dir, err)
	}
	for _, k := range horder {
		if h, ok := heur[k]; ok {
			s.heuristics = append(s.heuristics, h)
		}
	}
	return s, nil
}

func (s *snapshotLog) Commits(context.Context) ([]xa.CommitRecord, error) {
	var out []xa.CommitRecord
	for _, k := range s.order {
		if r, ok := s.commits[k]; ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s *snapshotLog) Lookup(_ context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	r, ok := s.commits[id.String()]
	return r, ok, nil
}

func (s *snapshotLog) Forget(context.Context, xa.GlobalID) error { return errReadOnly }

// openLog opens the decision log for writing; when another process holds
// it, the error says what to do.
func openLog(dir string, log *slog.Logger) (*filelog.Log, error) {
	if err := requireLog(dir); err != nil {
		return nil, err
	}
	l, err := filelog.Open(dir, filelog.Options{Logger: log})
	if errors.Is(err, filelog.ErrLocked) {
		return nil, fmt.Errorf("%w\nA transaction manager is running with this decision log: it resolves its own in-doubt branches. "+
			"Stop it to resolve them with xactl, or use --dry-run / xactl list, which read the log without taking it", err)
	}
	return l, corruptHint(dir, err)
}

// requireLog refuses a directory that holds no decision log. xactl never
// creates one (the transaction manager does, when it starts): a wrong
// log.dir would otherwise look like an empty log, every in-doubt branch
// would look undecided, and recovery would roll back branches whose commit
// is logged in the right directory.
func requireLog(dir string) error {
	rep, err := filelog.Verify(dir)
	switch {
	case errors.Is(err, filelog.ErrCorrupt):
		return nil // a log, damaged: reading or opening it says so
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("no decision log: %s does not exist; check log.dir (XACTL_LOG_DIR, --log-dir): "+
			"it must be the directory of the transaction manager's decision log", dir)
	case err != nil:
		return fmt.Errorf("reading the decision log: %w", err)
	case len(rep.Segments) == 0:
		return fmt.Errorf("no decision log in %s (no segment files); check log.dir (XACTL_LOG_DIR, --log-dir): "+
			"it must be the directory of the transaction manager's decision log. xactl does not create one: "+
			"in the wrong directory every in-doubt branch would look undecided and be rolled back", dir)
	}
	return nil
}

// corruptHint adds to a corrupt-log error what the operator should do.
func corruptHint(dir string, err error) error {
	if !errors.Is(err, filelog.ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w\nThe decision log in %s is damaged beyond a torn tail; nothing was changed and nothing is resolved "+
		"from it until it is repaired. See the damage with xactl log verify and the records with xactl log dump; "+
		"keep a copy of the directory and do not delete records by hand: every live commit record decides branches", err, dir)
}

func newScanner(c *config.Config, ps []*participant, log recovery.Log, logger *slog.Logger) (*recovery.Scanner, error) {
	return recovery.New(recovery.Config{
		Participants: rms(ps),
		Log:          log,
		Nodes:        c.Recovery.Nodes,
		Grace:        time.Duration(c.Recovery.Grace),
		Logger:       logger,
	})
}
