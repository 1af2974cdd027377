package recovery

import (
	"context"
	"log/slog"
)

// SpanScan is the span of one recovery scan (Config.Tracer), with the
// participants listed and, at its end, how many branches it found,
// committed, rolled back and left in doubt, the transactions it presumed
// aborted, and its errors.
const SpanScan = "xa.recovery.scan"

// Attributes of SpanScan.
const (
	AttrDryRun     = "xa.recovery.dry_run"
	AttrBranches   = "xa.recovery.branches"
	AttrCommitted  = "xa.recovery.committed"
	AttrRolledBack = "xa.recovery.rolled_back"
	AttrInDoubt    = "xa.recovery.in_doubt"
	AttrPresumed   = "xa.recovery.presumed_aborts"
	AttrErrors     = "xa.recovery.errors"
)

// traced runs scan inside a span when the scanner has a tracer.
func (s *Scanner) traced(ctx context.Context, dry bool) (Report, error) {
	tr := s.cfg.Tracer
	if tr == nil {
		return s.scan(ctx, dry)
	}
	ctx, sp := tr.Start(ctx, SpanScan)
	rep, err := s.scan(ctx, dry)
	if sp == nil {
		return rep, err
	}
	sp.SetAttributes(slog.Bool(AttrDryRun, dry))
	committed, rolledBack := 0, 0
	for _, b := range rep.Branches {
		switch {
		case b.Done && b.Verdict == Commit:
			committed++
		case b.Done && b.Verdict == Rollback:
			rolledBack++
		}
	}
	sp.SetAttributes(
		slog.Any("xa.participants", rep.Participants),
		slog.Int(AttrBranches, len(rep.Branches)),
		slog.Int(AttrCommitted, committed),
		slog.Int(AttrRolledBack, rolledBack),
		slog.Int(AttrInDoubt, rep.InDoubt()),
		slog.Int(AttrPresumed, len(rep.Aborted)),
		slog.Int(AttrErrors, len(rep.Errors)),
	)
	spanErr := err
	if spanErr == nil && len(rep.Errors) > 0 {
		spanErr = rep.Errors[0]
	}
	sp.End(spanErr)
	return rep, err
}
