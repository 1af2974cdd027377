package xa

import (
	"context"
	"log/slog"
)

// Tracer starts spans: one per global transaction (Config.Tracer), with a
// child per step of the protocol, and the recovery scans
// (recovery.Config.Tracer). Package otelxa implements it with
// OpenTelemetry; xa itself depends on no tracing library. Implementations
// must be safe for concurrent use.
//
// Start returns the context to run the traced work with (it carries the
// span, so that driver-level tracing nests under it) and the span, or a nil
// Span when nothing is recorded (a sampler said no, no provider is set):
// the caller then skips the rest of the tracing work, attributes included
// (they are set on the span after Start, so that a transaction that is not
// traced pays for none).
type Tracer interface {
	Start(ctx context.Context, name string) (context.Context, Span)
}

// Span is one traced operation. Attributes use slog.Attr (string, int,
// int64, bool and []string values) so that xa needs no tracing library.
type Span interface {
	// Start starts a child of this span in ctx (whose own span, if any,
	// is not the parent). It may return a nil Span, as Tracer.Start.
	Start(ctx context.Context, name string) (context.Context, Span)
	SetAttributes(attrs ...slog.Attr)
	// End ends the span; a non-nil err marks it failed.
	End(err error)
}

// Span names and attribute keys of the transaction manager. A transaction
// is SpanTransaction, from Begin to its end (after an asynchronous phase 2),
// with the global id, the node, and at the end the participants, the
// protocol, the outcome and the branches left to recovery. Its children:
// one SpanPrepare per branch, SpanDecisionLog for the decision record,
// SpanCommitLast for a last resource's commit (which is the decision), and
// per branch in phase 2 SpanCommit, SpanCommitOnePhase, SpanRollback or
// SpanLookupAbort, each attempt a span, with the participant's name.
const (
	SpanTransaction    = "xa.transaction"
	SpanPrepare        = "xa.prepare"
	SpanDecisionLog    = "xa.decision_log"
	SpanCommitLast     = "xa.commit_last"
	SpanCommit         = "xa.commit"
	SpanCommitOnePhase = "xa.commit_one_phase"
	SpanRollback       = "xa.rollback"
	SpanLookupAbort    = "xa.lookup_abort"

	AttrGlobalID     = "xa.global_id"
	AttrNode         = "xa.node"
	AttrParticipant  = "xa.participant"
	AttrParticipants = "xa.participants"
	AttrProtocol     = "xa.protocol"
	AttrOutcome      = "xa.outcome"
	AttrPending      = "xa.pending"
	AttrAttempt      = "xa.attempt"
	AttrVote         = "xa.vote"
	AttrBranches     = "xa.branches"
)

// Protocols, as TxStats.Protocol and the xa.protocol attribute report them.
const (
	// ProtocolNone: no branch was prepared or committed in one phase (the
	// transaction did nothing, only read without writing anywhere, or
	// aborted before any prepare).
	ProtocolNone = "none"
	// ProtocolOnePhase: the only branch that did work committed (or was
	// told to commit) in one phase.
	ProtocolOnePhase = "one_phase"
	// ProtocolTwoPhase: branches were prepared.
	ProtocolTwoPhase = "two_phase"
	// ProtocolLastResource: branches were prepared and a last resource's
	// commit was the decision.
	ProtocolLastResource = "last_resource"
)

// ContextObserver is an Observer that is also given the transaction's
// context (the caller's values, and the transaction's span when a Tracer
// is set: for exemplars or per-tenant labels). The Manager calls
// ObserveTxContext instead of ObserveTx when its Observer implements it.
type ContextObserver interface {
	Observer
	ObserveTxContext(ctx context.Context, s TxStats)
}

// traceStart starts the span of action a, a child of the transaction's,
// and returns the context to perform it with. Only called when tracing.
func (tx *Tx) traceStart(ctx context.Context, a action) context.Context {
	var (
		name    string
		i       int
		attempt int
	)
	switch a := a.(type) {
	case actPrepare:
		name, i = SpanPrepare, a.i
	case actLog:
		name, i = SpanDecisionLog, -1
	case actCommitLast:
		name, i = SpanCommitLast, a.i
	case actCommit:
		name, i, attempt = SpanCommit, a.i, a.attempt
	case actOnePhase:
		name, i = SpanCommitOnePhase, a.i
	case actRollback:
		name, i, attempt = SpanRollback, a.i, a.attempt
	case actLookupAbort:
		name, i = SpanLookupAbort, a.i
	default:
		return ctx
	}
	ctx, sp := tx.span.Start(ctx, name)
	if sp == nil {
		return ctx
	}
	if i >= 0 {
		sp.SetAttributes(slog.String(AttrParticipant, tx.rms[i].Name()))
	} else if l, ok := a.(actLog); ok {
		sp.SetAttributes(slog.Int(AttrBranches, len(l.branches)))
	}
	if attempt > 0 {
		sp.SetAttributes(slog.Int(AttrAttempt, attempt))
	}
	if tx.spans == nil {
		tx.spans = make([]Span, len(tx.branches)+1)
	}
	tx.spans[tx.spanKey(i)] = sp
	return ctx
}

// spanKey is where the span of branch i (or of the decision log, -1)
// waits for its outcome.
func (tx *Tx) spanKey(i int) int {
	if i < 0 {
		return len(tx.spans) - 1
	}
	return i
}

// traceDone ends the span of the action whose outcome ev is.
func (tx *Tx) traceDone(ev event) {
	if tx.spans == nil {
		return
	}
	var (
		i   int
		err error
	)
	switch ev := ev.(type) {
	case evVote:
		i, err = ev.i, ev.err
		if sp := tx.spans[tx.spanKey(i)]; sp != nil {
			sp.SetAttributes(slog.String(AttrVote, ev.vote.String()))
		}
	case evLogged:
		i, err = -1, ev.err
	case evPhase2:
		i, err = ev.i, ev.err
	case evLookedUp:
		i, err = ev.i, ev.err
	default:
		return
	}
	k := tx.spanKey(i)
	if sp := tx.spans[k]; sp != nil {
		sp.End(err)
		tx.spans[k] = nil
	}
}

// traceFinish ends the transaction's span.
func (tx *Tx) traceFinish(st TxStats, err error) {
	names := make([]string, len(tx.rms))
	for i, rm := range tx.rms {
		names[i] = rm.Name()
	}
	for _, sp := range tx.spans {
		if sp != nil {
			sp.End(nil) // an action whose outcome never came (cannot happen: finish waits for them)
		}
	}
	tx.span.SetAttributes(
		slog.Any(AttrParticipants, names),
		slog.String(AttrProtocol, st.Protocol),
		slog.String(AttrOutcome, st.Outcome),
		slog.Int(AttrPending, st.Pending),
	)
	tx.span.End(err)
}

// actionCtx returns the context to perform action a with: d.ctx, or when
// tracing, d.ctx with a's span.
func (d *driver) actionCtx(a action) context.Context {
	if d.tx.span == nil {
		return d.ctx
	}
	return d.tx.traceStart(d.ctx, a)
}

// protocol records which protocol action a belongs to.
func (t *tracker) protocol(a action) {
	switch a.(type) {
	case actCommitLast:
		t.proto = ProtocolLastResource
	case actPrepare:
		if t.proto != ProtocolLastResource {
			t.proto = ProtocolTwoPhase
		}
	case actOnePhase:
		if t.proto == "" {
			t.proto = ProtocolOnePhase
		}
	}
}

// protocolOf returns the protocol the transaction ran.
func (t *tracker) protocolOf() string {
	if t.proto == "" {
		return ProtocolNone
	}
	return t.proto
}
