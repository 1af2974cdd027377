package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/sink/sqlsink"
	"github.com/xadb/xa/xa"
)

// resolveView is the result of xactl commit and rollback.
type resolveView struct {
	Participant  string `json:"participant"`
	XID          string `json:"xid"`
	Action       string `json:"action"`
	Forced       bool   `json:"forced"`
	LoggedCommit bool   `json:"logged_commit"`
	// Fenced: the rollback recorded its transaction's abort first.
	Fenced bool `json:"fenced"`
	// Contradiction: how a forced resolution went against the log.
	Contradiction string `json:"contradiction,omitempty"`
}

// newResolve is xactl commit and xactl rollback. The policy (what
// contradicts the decision log, the fence before a rollback) is
// recovery.Scanner.Resolve's; this is flags, output and exit codes.
func newResolve(g *globals, commit bool) *cobra.Command {
	verb, action, short := "rollback", xa.OutcomeRollback, "roll it back"
	if commit {
		verb, action, short = "commit", xa.OutcomeCommit, "commit it"
	}
	var force bool
	var only, reason string
	cmd := &cobra.Command{
		Use:   verb + " XID",
		Short: "Resolve one prepared branch by hand: " + short,
		Long: fmt.Sprintf(`%s the prepared branch XID (as 'xactl list' shows it: formatID:gtrid:bqual)
on the participant that holds it. Participants on one MySQL/MariaDB server
see the same branches: a branch of ours is resolved through the participant
its commit record names. Name the participant with --participant when the
XID is prepared on participants of different servers, which only other
applications' XIDs can be.

xactl judges the branch as recovery would, and refuses to contradict the
decision log: committing a branch with no recorded commit (or with a
recorded abort), rolling back one whose commit is recorded, rolling back
one still inside the grace period (its coordinator may yet commit it), one
of another decision log or older than this one, or one whose decision may
be in a delegated decision table that is not configured, touching a branch
that is not ours, or resolving a branch so that its transaction's manual
resolutions disagree. --force does it anyway; the resolution is then
recorded in the decision log as a heuristic outcome, which list and 'log
dump' show until 'xactl heuristic clear'. Say why with --reason.

Rolling back a branch of ours without a decision records its transaction's
abort first, as recovery's presumed abort does: a coordinator that records
its commit meanwhile wins, and the rollback is refused.

A branch of an exactly-once sink (format 0x78730001, xs1.<sink>.…) is
refused, saying what the sink's restore would do with it: its decision is
in the sink's progress target, and the sink's restore resolves it. --force
does it anyway, recorded as a heuristic outcome.`, strings.ToUpper(verb[:1])+verb[1:]),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			x, err := xa.ParseXID(args[0])
			if err != nil {
				return usageErr("%v\nGive the XID as 'xactl list' shows it: formatID:gtrid:bqual", err)
			}
			c, err := g.loadConfig(config.Need{Log: true, Participants: true})
			if err != nil {
				return err
			}
			if only != "" {
				if _, ok := c.Participant(only); !ok {
					return usageErr("--participant %q is not configured", only)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			logger := g.logger()
			if ref, ok := sqlsink.ParseXID(x); ok && !force {
				return refuseSinkBranch(ctx, c, ref, verb, g.sinkLogger())
			}
			env, err := openRecovery(ctx, c, forWriting, logger)
			if err != nil {
				return err
			}
			defer env.Close()
			ps, sc := env.ps, env.sc
			if err := ps.unreachable[only]; only != "" && err != nil {
				return fmt.Errorf("participant %q could not be opened: %w", only, err)
			}
			res, err := sc.Resolve(ctx, x, action, recovery.ResolveOptions{Participant: only, Force: force, Reason: reason})
			openErrs := ps.openErrors()
			switch {
			case errors.Is(err, recovery.ErrContradiction):
				return fmt.Errorf("%w.\nUse --force to do it anyway; it will be recorded in the decision log as a heuristic outcome (say why with --reason)", err)
			case errors.Is(err, recovery.ErrAmbiguous):
				return usageErr("%v\nChoose one with --participant", err)
			case errors.Is(err, recovery.ErrNotPrepared):
				if len(openErrs) > 0 {
					return fmt.Errorf("%w\n%s", err, joinLines("and some participants could not be opened:", openErrs))
				}
				return err
			case err != nil:
				hint := ""
				if xa.Retryable(err) {
					hint = " (transient: try again shortly)"
				}
				return fmt.Errorf("%w%s", explainAll([]error{err})[0], hint)
			}
			v := resolveView{Participant: res.Participant, XID: res.XID.String(), Action: verb, Forced: res.Forced,
				LoggedCommit: res.Logged, Fenced: res.Fenced, Contradiction: res.Contradiction}
			err = g.out.result(v, func(w io.Writer) {
				fmt.Fprintf(w, "%s %s on %s", done(verb), v.XID, v.Participant)
				switch {
				case v.Forced:
					fmt.Fprintf(w, " (forced: %s; recorded as a heuristic outcome)", v.Contradiction)
				case v.Fenced:
					fmt.Fprint(w, " (its transaction's abort is recorded first: its coordinator can no longer commit it)")
				}
				fmt.Fprintln(w)
			})
			if err != nil {
				return err
			}
			if len(openErrs) > 0 {
				// The XID may be prepared there too (only other
				// applications reuse an XID across databases).
				return &exitError{code: ExitError, err: errors.New(joinLines("the branch was resolved, but some participants could not be opened:", openErrs))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&force, "force", false, "act even against the decision log; recorded as a heuristic outcome")
	f.StringVar(&only, "participant", "", "only look on this participant")
	f.StringVar(&reason, "reason", "", "why (kept with a forced resolution)")
	return cmd
}

func done(verb string) string {
	if verb == "commit" {
		return "committed"
	}
	return "rolled back"
}

func joinLines(head string, errs []error) string {
	var b strings.Builder
	b.WriteString(head)
	for _, e := range errs {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}
