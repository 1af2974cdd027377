package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/sink/sqlsink"
)

// Branches of the exactly-once sinks are not the transaction manager's:
// recovery sees them as foreign and never touches them. list and recover
// show them as the sink's, with what its restore would do; commit and
// rollback refuse them without --force.

// sinkRestores says what each configured sink's restore would do with its
// prepared branches, from sqlsink.Status.
type sinkRestores struct {
	c        *config.Config
	branches map[sqlsink.Ref]sqlsink.BranchStatus
	errs     map[string]error // by sink: why its status could not be read
	asked    map[string]bool
}

// readSinkRestores reads the status of every configured sink named by a
// branch of branches; nothing when ask is false.
func readSinkRestores(ctx context.Context, c *config.Config, branches []recovery.Branch, ask bool, logger *slog.Logger) *sinkRestores {
	r := &sinkRestores{c: c, branches: map[sqlsink.Ref]sqlsink.BranchStatus{}, errs: map[string]error{}, asked: map[string]bool{}}
	if !ask {
		return r
	}
	for _, b := range branches {
		ref, ok := sqlsink.ParseXID(b.Prepared.XID)
		if !ok || r.asked[ref.Sink] {
			continue
		}
		r.asked[ref.Sink] = true
		sc, ok := c.Sink(ref.Sink)
		if !ok {
			continue
		}
		st, err := sinkBranches(ctx, c, sc, logger)
		if err != nil {
			r.errs[ref.Sink] = err
			continue
		}
		for _, bs := range st {
			r.branches[bs.Ref] = bs
		}
	}
	return r
}

// sinkBranches returns the sink's prepared branches with what its restore
// would do.
func sinkBranches(ctx context.Context, c *config.Config, sc config.Sink, logger *slog.Logger) ([]sqlsink.BranchStatus, error) {
	cfg := c.SinkConfig(sc)
	cfg.Logger = logger
	s, err := sqlsink.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	st, err := s.Status(ctx)
	if err != nil {
		return nil, err
	}
	return st.Branches, nil
}

// view describes the sink branch ref.
func (r *sinkRestores) view(ref sqlsink.Ref) *sinkBranchView {
	var bs *sqlsink.BranchStatus
	if b, ok := r.branches[ref]; ok {
		bs = &b
	}
	v := newSinkBranchView(r.c, ref, bs)
	switch {
	case r.errs[ref.Sink] != nil:
		v.Error = "its status could not be read: " + r.errs[ref.Sink].Error()
	case bs == nil && v.Configured && r.asked[ref.Sink]:
		// Listed by the participant, not by the sink's status (resolved
		// meanwhile, or on a target of another name on the same server).
		v.Error = "not among the sink's branches on its targets"
	}
	return &v
}

// annotateSinkBranches marks the views of sink branches as the sink's:
// views[i] is the view of branches[i].
func annotateSinkBranches(views []branchView, branches []recovery.Branch, r *sinkRestores) {
	for i, b := range branches {
		ref, ok := sqlsink.ParseXID(b.Prepared.XID)
		if !ok {
			continue
		}
		sv := r.view(ref)
		v := &views[i]
		v.Sink = sv
		v.Decision = "-"
		switch sv.Decision {
		case sqlsink.DecidedCommit.String():
			v.Decision = "commit"
		case sqlsink.DecidedAbort.String():
			v.Decision = "abort"
		case sqlsink.NoDecision.String():
			v.Decision = "none"
		}
		v.Action = fmt.Sprintf("none: sink %s's; its restore resolves it", ref.Sink)
		if sv.Restore != "" {
			v.Action = fmt.Sprintf("none: sink %s's; its restore would %s (%s)", ref.Sink, sv.Restore, sv.Why)
		}
	}
}

// printSinkBranches prints the sink branches of views, if any.
func printSinkBranches(w io.Writer, views []branchView) {
	var sv []branchView
	for _, v := range views {
		if v.Sink != nil {
			sv = append(sv, v)
		}
	}
	if len(sv) == 0 {
		return
	}
	fmt.Fprintln(w, "\nBranches of exactly-once sinks (resolved by each sink's restore, never by xactl recover; xactl sink status NAME):")
	tw := table(w)
	fmt.Fprintln(tw, "PARTICIPANT\tXID\tSINK\tINCARNATION\tCHECKPOINT\tTARGET\tAGE\tDECISION\tRESTORE")
	for _, v := range sv {
		s := v.Sink
		dec := s.Decision
		if dec == "" {
			dec = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", v.Participant, s.XID, s.Sink, s.incarnationText(), s.Checkpoint, s.Target, v.age, dec, s.restoreText())
	}
	tw.Flush()
}

// refuseSinkBranch refuses to commit or roll back a sink's branch by hand:
// its decision is in the sink's progress target, not in the decision log.
func refuseSinkBranch(ctx context.Context, c *config.Config, ref sqlsink.Ref, verb string, logger *slog.Logger) error {
	var b strings.Builder
	sc, configured := c.Sink(ref.Sink)
	progress := "its progress target"
	var restore *sqlsink.BranchStatus // what the sink's restore would do, when known
	if configured {
		progress += " " + sc.Progress
	}
	fmt.Fprintf(&b, "%s is a branch of sink %s (%s, checkpoint %d, target %s): not the transaction manager's. "+
		"The sink's restore resolves it from the sink's decisions (xa_sink_decisions in %s), which the decision log knows nothing of",
		ref.XID(), ref.Sink, incarnationWords(ref), ref.Checkpoint, ref.Target, progress)
	if configured {
		brs, err := sinkBranches(ctx, c, sc, logger)
		i := slices.IndexFunc(brs, func(bs sqlsink.BranchStatus) bool { return bs.Ref == ref })
		switch {
		case err != nil:
			fmt.Fprintf(&b, ".\nWhat its restore would do could not be read: %v", err)
		case i < 0:
			b.WriteString(".\nThe sink's status does not list it on its targets (resolved meanwhile?)")
		default:
			restore = &brs[i]
			fmt.Fprintf(&b, ".\nIts checkpoint is %s; the sink's restore would %s it (%s)", restore.Decision, restore.Action, restore.Why)
		}
	} else {
		fmt.Fprintf(&b, ".\nSink %s is not configured here (sinks:)", ref.Sink)
	}
	doing, forced := "Committing it", "commits it"
	same := restore != nil && restore.Action == sqlsink.ActCommit
	if verb != "commit" {
		doing, forced = "Rolling it back", "rolls it back"
		same = restore != nil && restore.Action == sqlsink.ActRollback
	}
	fmt.Fprintf(&b, ".\nxactl sink status %s shows its branches. ", ref.Sink)
	switch {
	case same:
		fmt.Fprintf(&b, "%s is what the sink's restore does itself, when an instance of the sink starts (xactl sink run %s); "+
			"--force %s now, recorded as a heuristic outcome", doing, ref.Sink, forced)
	case restore != nil:
		fmt.Fprintf(&b, "--force %s anyway, recorded as a heuristic outcome: against what the sink's restore would do, "+
			"its rows would land in some targets and not in others, or twice", forced)
	default:
		fmt.Fprintf(&b, "--force %s anyway, recorded as a heuristic outcome: if that is not what the sink's restore would do, "+
			"its rows would land in some targets and not in others, or twice", forced)
	}
	return &exitError{code: ExitError, err: fmt.Errorf("%s", b.String())}
}

func incarnationWords(ref sqlsink.Ref) string {
	if ref.External() {
		return fmt.Sprintf("external member %d, generation %d", ref.Member(), ref.Generation())
	}
	return fmt.Sprintf("incarnation %d", ref.Incarnation)
}
