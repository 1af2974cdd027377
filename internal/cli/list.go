package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// branchView is one prepared branch as list and recover show it.
type branchView struct {
	Participant string `json:"participant"`
	XID         string `json:"xid"`
	Raw         string `json:"raw"`
	GlobalID    string `json:"global_id,omitempty"`
	Node        string `json:"node,omitempty"`
	// Log is the decision log the XID names ("" for none).
	Log        string `json:"log,omitempty"`
	AgeSeconds *int64 `json:"age_seconds,omitempty"`
	age        string
	// Decision is what is recorded: commit, abort (presumed abort
	// recorded), none, or "-" (not ours).
	Decision  string `json:"decision"`
	Heuristic string `json:"heuristic,omitempty"`
	// Verdict is recovery's (recovery.Verdict): commit, rollback, wait,
	// foreign, other-node, other-log, predates-log, blocked, anomaly.
	Verdict string `json:"verdict"`
	Action  string `json:"action"`
	// Reason says why a branch is left alone.
	Reason string `json:"reason,omitempty"`
	// InDoubt: ours and not resolved (Report.InDoubt counts it).
	InDoubt bool   `json:"in_doubt"`
	Done    bool   `json:"done"`
	Error   string `json:"error,omitempty"`
	// Sink: the branch is an exactly-once sink's (recovery sees it as
	// foreign): which sink, instance and checkpoint, and what the sink's
	// restore would do with it.
	Sink *sinkBranchView `json:"sink,omitempty"`
}

// heurKey keys heuristic records: by participant and XID.
func heurKey(rm string, x string) string { return rm + "\x00" + x }

func viewBranch(b recovery.Branch, grace time.Duration, heur map[string]xa.HeuristicRecord) branchView {
	v := branchView{Participant: b.Participant, Raw: b.Prepared.Raw, Done: b.Done, age: age(b.Age, b.AgeKnown),
		Verdict: b.Verdict.String(), Reason: b.Reason}
	v.InDoubt = recovery.Report{Branches: []recovery.Branch{b}}.InDoubt() > 0
	if !b.Prepared.XID.IsZero() {
		v.XID = b.Prepared.XID.String()
	}
	if b.AgeKnown {
		s := int64(b.Age / time.Second)
		v.AgeSeconds = &s
	}
	if !b.ID.IsZero() {
		v.GlobalID, v.Node = b.ID.String(), b.ID.Node
	}
	if b.Log != 0 {
		v.Log = b.Log.String()
	}
	switch {
	case b.Verdict == recovery.Foreign:
		v.Decision = "-"
	case b.Logged:
		v.Decision = "commit"
	case b.AbortLogged:
		v.Decision = "abort"
	default:
		v.Decision = "none"
	}
	if h, ok := heur[heurKey(b.Participant, v.XID)]; ok && v.XID != "" {
		v.Heuristic = h.Action.String()
		if h.Forced {
			v.Heuristic += " (forced)"
		}
	}
	switch b.Verdict {
	case recovery.Commit:
		v.Action = "commit"
	case recovery.Rollback:
		v.Action = "rollback (presumed abort)"
	case recovery.Wait:
		if !strings.Contains(b.Reason, "presumed aborted once older than") {
			// Another process holds the log (a shared log): its recovery
			// presumes abort, not xactl's.
			v.Action = "wait (no decision yet: presumed abort is the log holder's, not xactl's)"
			break
		}
		if b.AgeKnown {
			v.Action = fmt.Sprintf("wait %s (no decision yet: its coordinator may still decide; presumed abort after the %s grace period)",
				(grace - b.Age).Round(time.Second), grace)
		} else {
			v.Action = fmt.Sprintf("wait (age unknown; no decision yet: presumed abort after the %s grace period)", grace)
		}
		v.Reason = ""
	case recovery.Foreign:
		v.Action = "none: not ours"
	case recovery.OtherNode:
		v.Action = "none: node " + b.ID.Node + " resolves it"
	case recovery.OtherLog:
		if b.Log == 0 {
			v.Action = "none: its XID names no decision log"
		} else {
			v.Action = "none: belongs to log " + b.Log.String()
		}
	case recovery.Predates:
		v.Action = "none: older than this log"
	case recovery.Blocked:
		v.Action = "blocked: " + b.Reason
		v.Reason = ""
	case recovery.Anomaly:
		v.Action = "anomaly: not in its commit record (investigate)"
	}
	if b.Err != nil {
		v.Error = b.Err.Error()
	}
	return v
}

func viewBranches(rep recovery.Report, grace time.Duration, heur map[string]xa.HeuristicRecord) []branchView {
	views := []branchView{}
	for _, b := range rep.Branches {
		views = append(views, viewBranch(b, grace, heur))
	}
	return views
}

// unlistedView is a configured participant that no scan could list.
type unlistedView struct {
	Participant string `json:"participant"`
	Error       string `json:"error"`
	// Identity: not the store the decision log recorded under the name,
	// or one without an identity (xa.ErrIdentity).
	Identity bool `json:"identity_mismatch,omitempty"`
}

// unlisted returns the configured participants the scan did not list, with
// why.
func unlisted(ps *participants, rep recovery.Report) []unlistedView {
	out := []unlistedView{}
	for _, name := range ps.names {
		if slices.Contains(rep.Participants, name) {
			continue
		}
		v := unlistedView{Participant: name, Error: "could not be listed (see the errors)"}
		if err := ps.unreachable[name]; err != nil {
			v.Error = "could not be opened: " + err.Error()
			v.Identity = errors.Is(err, xa.ErrIdentity)
		} else if err := rep.Mismatched[name]; err != nil {
			v.Error = "not listed, nothing done: " + err.Error()
			v.Identity = true
		} else if err := rep.Unlisted[name]; err != nil {
			v.Error = "could not be listed: " + explainAll([]error{err})[0].Error()
		}
		out = append(out, v)
	}
	return out
}

// identityExit is the error of list and recover when every participant
// was listed but some participant or decision table is not the store the
// decision log recorded under its name (or has no identity): exit code 3,
// an anomaly that blocks recovery there until the configuration is fixed.
// nil when there is none, or when another participant could not be listed
// at all (exit code 1 then).
func identityExit(missing []unlistedView, rep recovery.Report) error {
	n := 0
	for _, u := range missing {
		if !u.Identity {
			return nil
		}
		n++
	}
	for name := range rep.Mismatched {
		if !slices.ContainsFunc(missing, func(u unlistedView) bool { return u.Participant == name }) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return &exitError{code: ExitInDoubt, err: fmt.Errorf("the identity of %d configured participant(s) or decision table(s) is not the one the decision log "+
		"recorded under that name (see above): nothing was done there, no record naming them was forgotten, and presumed abort waits; fix the configuration", n)}
}

// printBranches prints the branch table, the reasons of branches left
// alone, and what is not known.
func printBranches(w io.Writer, all []branchView, listed []string, missing []unlistedView, withResult bool) {
	// The sinks' branches have a table of their own.
	var views []branchView
	for _, v := range all {
		if v.Sink == nil {
			views = append(views, v)
		}
	}
	switch {
	case len(all) == 0 && len(listed) > 0:
		fmt.Fprintf(w, "No prepared branches on %s.\n", strings.Join(listed, ", "))
	case len(views) == 0 && len(listed) > 0:
		fmt.Fprintf(w, "No prepared branches on %s but the sinks'.\n", strings.Join(listed, ", "))
	case len(views) > 0:
		tw := table(w)
		head := "PARTICIPANT\tXID\tNODE\tAGE\tDECISION\tACTION"
		if withResult {
			head += "\tRESULT"
		}
		fmt.Fprintln(tw, head)
		for _, v := range views {
			id := v.XID
			if id == "" {
				id = v.Raw
			}
			dec := v.Decision
			if v.Heuristic != "" {
				dec += ", heuristic " + v.Heuristic
			}
			node := v.Node
			if node == "" {
				node = "-"
			}
			line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", v.Participant, id, node, v.age, dec, v.Action)
			if withResult {
				switch {
				case v.Error != "":
					line += "\t" + v.Error
				case v.Done:
					line += "\tdone"
				default:
					line += "\t-"
				}
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
		for _, v := range views {
			if v.Reason != "" && v.Verdict != recovery.Foreign.String() {
				fmt.Fprintf(w, "  %s on %s: %s\n", v.XID, v.Participant, v.Reason)
			}
		}
	}
	printSinkBranches(w, all)
	if len(missing) > 0 {
		if len(listed) == 0 {
			fmt.Fprintf(w, "None of the %s could be listed: nothing is known about their prepared branches.\n", plural(len(missing), "participant"))
		} else {
			fmt.Fprintf(w, "%s could not be listed: nothing is known about their prepared branches.\n", plural(len(missing), "participant"))
		}
		for _, m := range missing {
			fmt.Fprintf(w, "  %s: %s\n", m.Participant, m.Error)
		}
	}
}

type heuristicView struct {
	Participant string `json:"participant"`
	XID         string `json:"xid"`
	Action      string `json:"action"`
	Forced      bool   `json:"forced"`
	Time        string `json:"time"`
	Reason      string `json:"reason,omitempty"`
}

func viewHeuristics(hs []xa.HeuristicRecord) []heuristicView {
	out := []heuristicView{}
	for _, h := range hs {
		out = append(out, heuristicView{Participant: h.RM, XID: h.XID.String(), Action: h.Action.String(),
			Forced: h.Forced, Time: timeText(h.Time), Reason: h.Reason})
	}
	return out
}

func printHeuristics(w io.Writer, hs []heuristicView) {
	tw := table(w)
	fmt.Fprintln(tw, "PARTICIPANT\tXID\tACTION\tFORCED\tTIME\tREASON")
	for _, h := range hs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\n", h.Participant, h.XID, h.Action, h.Forced, h.Time, h.Reason)
	}
	tw.Flush()
}

type abortView struct {
	GlobalID string `json:"global_id"`
	Logged   string `json:"logged"`
	Reason   string `json:"reason"`
}

func viewAborts(as []xa.AbortRecord) []abortView {
	out := []abortView{}
	for _, a := range as {
		out = append(out, abortView{GlobalID: a.ID.String(), Logged: timeText(a.Logged), Reason: a.Reason})
	}
	return out
}

// listView is list's result.
type listView struct {
	Log      *identityView `json:"log"`
	LogInUse bool          `json:"log_in_use"`
	// Grace is the presumed-abort grace period applied: the log's, or
	// recovery.grace when longer.
	Grace      string          `json:"grace"`
	Listed     []string        `json:"listed"`
	Unlisted   []unlistedView  `json:"unlisted"`
	Branches   []branchView    `json:"branches"`
	Heuristics []heuristicView `json:"heuristics"`
	// Aborts are the abort records (presumed aborts) the log keeps.
	Aborts  []abortView `json:"aborts"`
	InDoubt int         `json:"in_doubt"`
	Errors  []string    `json:"errors"`
}

func newList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every prepared branch on the participants, with its decision and what recovery would do",
		Long: `List every prepared branch on every participant: ours (with the recorded
decision, the owning node and its age) and other applications' (shown, never
touched). ACTION is what 'xactl recover' would do now:

  commit                       a commit decision is recorded
  rollback (presumed abort)    no decision, older than the grace period (or an
                               abort is recorded)
  wait T                       no decision yet: T left of the grace period
  none: belongs to log X       its decision is in another decision log
  none: older than this log    it began before this log was created
  blocked: ...                 its decision may be in a participant's decision
                               table that is not configured or not answering
  anomaly: ...                 its commit record does not list it

Branches of the exactly-once sinks (sinks:, xactl sink) have a table of
their own: the XID, and the sink, instance (incarnation) and checkpoint it names,
its target, and what the sink's restore would do with it (from the sink's
decisions in its progress target; xactl sink status NAME explains). They
are never the transaction manager's to resolve.

The decision log is read without being taken, so list works while a
transaction manager runs. Abort records and heuristic records (manual
resolutions, kept until 'xactl heuristic clear') are shown too.

Exit code 3 when branches of ours are in doubt (waiting, blocked, of another
log or older than this one included); 1 when a participant could not be
listed: nothing is known about its branches.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadConfig(config.Need{Log: true, Participants: true})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			logger := g.logger()
			log, err := openDecisionLog(c, readOnly, logger)
			if err != nil {
				return err
			}
			defer log.Close()
			ps := openParticipants(ctx, c, logger)
			defer ps.Close()
			sc, err := newScanner(c, ps, log, logger)
			if err != nil {
				return err
			}
			rep, err := sc.Plan(ctx)
			if err != nil {
				return err
			}
			hs, err := log.Heuristics(ctx)
			if err != nil {
				return err
			}
			aborts, err := log.Aborts(ctx)
			if err != nil {
				return err
			}
			heur := map[string]xa.HeuristicRecord{}
			for _, h := range hs {
				heur[heurKey(h.RM, h.XID.String())] = h
			}
			errs := append(ps.openErrors(), explainAll(rep.Errors)...)
			v := listView{
				Log: viewIdentity(sc.Identity()), LogInUse: log.inUse, Grace: sc.Grace().String(),
				Listed: append([]string{}, rep.Participants...), Unlisted: unlisted(ps, rep),
				Branches: viewBranches(rep, sc.Grace(), heur), Heuristics: viewHeuristics(hs), Aborts: viewAborts(aborts),
				InDoubt: rep.InDoubt(), Errors: errStrings(errs),
			}
			annotateSinkBranches(v.Branches, rep.Branches, readSinkRestores(ctx, c, rep.Branches, true, g.sinkLogger()))
			err = g.out.result(v, func(w io.Writer) {
				fmt.Fprintf(w, "Decision log %s of node %s, grace period %s", v.Log.ID, v.Log.Node, v.Grace)
				if v.Grace != v.Log.Grace {
					fmt.Fprintf(w, " (recovery.grace; the log's is %s)", v.Log.Grace)
				}
				if v.LogInUse {
					fmt.Fprint(w, " (read while a transaction manager has it open)")
				}
				fmt.Fprintln(w, ".")
				printBranches(w, v.Branches, v.Listed, v.Unlisted, false)
				if v.InDoubt > 0 {
					fmt.Fprintf(w, "%s of ours in doubt.\n", plural(v.InDoubt, "branch"))
				}
				if len(v.Heuristics) > 0 {
					fmt.Fprintln(w, "\nHeuristic outcomes (manual resolutions; xactl heuristic clear removes one once dealt with):")
					printHeuristics(w, v.Heuristics)
				}
				if len(v.Aborts) > 0 {
					fmt.Fprintf(w, "\n%s kept (presumed aborts; xactl log dump --live shows their reasons).\n", plural(len(v.Aborts), "abort record"))
				}
			})
			if err != nil {
				return err
			}
			// Participants that could not be opened are in the listing's
			// own words already.
			g.out.errors(errStrings(explainAll(rep.Errors)))
			if err := identityExit(v.Unlisted, rep); err != nil {
				return err
			}
			switch {
			case len(v.Unlisted) > 0:
				return &exitError{code: ExitError, err: fmt.Errorf("%d of %d participants could not be listed: nothing is known about their prepared branches",
					len(v.Unlisted), len(ps.names))}
			case len(errs) > 0:
				return &exitError{code: ExitError, err: fmt.Errorf("the listing is incomplete: %s", plural(len(errs), "error"))}
			case v.InDoubt > 0:
				return errInDoubt
			}
			return nil
		},
	}
}
