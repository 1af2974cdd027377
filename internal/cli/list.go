package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// branchView is one in-doubt branch as list and recover show it.
type branchView struct {
	Participant string `json:"participant"`
	XID         string `json:"xid"`
	Raw         string `json:"raw"`
	GlobalID    string `json:"global_id,omitempty"`
	Node        string `json:"node,omitempty"`
	AgeSeconds  *int64 `json:"age_seconds,omitempty"`
	age         string
	Decision    string `json:"decision"` // commit, none, or "-" (foreign)
	Heuristic   string `json:"heuristic,omitempty"`
	Action      string `json:"action"`
	Done        bool   `json:"done"`
	Error       string `json:"error,omitempty"`
}

func viewBranch(b recovery.Branch, grace time.Duration, heur map[string]xa.HeuristicRecord) branchView {
	v := branchView{Participant: b.Participant, Raw: b.Prepared.Raw, Done: b.Done, age: age(b.Age, b.AgeKnown)}
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
	switch {
	case b.Verdict == recovery.Foreign:
		v.Decision = "-"
	case b.Logged:
		v.Decision = "commit"
	default:
		v.Decision = "none"
	}
	if h, ok := heur[v.XID]; ok && v.XID != "" {
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
		left := grace - b.Age
		v.Action = fmt.Sprintf("wait %s (grace period: its coordinator may still decide)", left.Round(time.Second))
	case recovery.Foreign:
		v.Action = "none: not ours"
	case recovery.OtherNode:
		v.Action = "none: node " + b.ID.Node + " resolves it"
	case recovery.Anomaly:
		v.Action = "none: not in its commit record (investigate)"
	}
	if b.Err != nil {
		v.Error = b.Err.Error()
	}
	return v
}

// ours reports whether recovery is responsible for the branch and it is
// still in doubt.
func inDoubt(b recovery.Branch) bool {
	switch b.Verdict {
	case recovery.Commit, recovery.Rollback:
		return !b.Done
	case recovery.Wait, recovery.Anomaly:
		return true
	}
	return false
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
			Forced: h.Forced, Time: h.Time.UTC().Format(time.RFC3339), Reason: h.Reason})
	}
	return out
}

func printBranches(w io.Writer, views []branchView, withResult bool) {
	if len(views) == 0 {
		fmt.Fprintln(w, "No prepared branches.")
		return
	}
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
}

func printErrors(w io.Writer, errs []error) {
	for _, err := range errs {
		fmt.Fprintln(w, "error:", err)
	}
}

func newList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every prepared branch on the participants, with its decision and what recovery would do",
		Long: `List every prepared branch on every participant: ours (with the logged decision,
the owning node and its age) and other applications' (shown, never touched).
ACTION is what 'xactl recover' would do now.

The decision log is read without being taken, so list works while a
transaction manager runs. Exit code 3 when branches of ours are in doubt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			c, err := g.loadConfig(true)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			logger := g.logger()
			snap, err := readSnapshot(c.Log.Dir)
			if err != nil {
				return fmt.Errorf("reading the decision log: %w", err)
			}
			ps, errs := openParticipants(ctx, c, logger)
			defer closeAll(ps)
			sc, err := newScanner(c, ps, snap, logger)
			if err != nil {
				return err
			}
			rep, err := sc.Plan(ctx)
			if err != nil {
				return err
			}
			errs = append(errs, rep.Errors...)
			heur := map[string]xa.HeuristicRecord{}
			for _, h := range snap.heuristics {
				heur[h.XID.String()] = h
			}
			views := []branchView{}
			doubt := 0
			for _, b := range rep.Branches {
				views = append(views, viewBranch(b, time.Duration(c.Recovery.Grace), heur))
				if inDoubt(b) {
					doubt++
				}
			}
			if asJSON {
				err = writeJSON(g.stdout, map[string]any{
					"branches": views, "heuristics": viewHeuristics(snap.heuristics), "in_doubt": doubt, "errors": errStrings(errs),
				})
				if err != nil {
					return err
				}
			} else {
				printBranches(g.stdout, views, false)
				if len(snap.heuristics) > 0 {
					fmt.Fprintln(g.stdout, "\nHeuristic outcomes (manual resolutions):")
					printHeuristics(g.stdout, snap.heuristics)
				}
				printErrors(g.stderr, errs)
			}
			switch {
			case len(errs) > 0:
				return &exitError{code: ExitError, err: errors.New("some participants could not be listed")}
			case doubt > 0:
				return errInDoubt
			}
			return nil
		},
	}
}

func printHeuristics(w io.Writer, hs []xa.HeuristicRecord) {
	tw := table(w)
	fmt.Fprintln(tw, "PARTICIPANT\tXID\tACTION\tFORCED\tTIME\tREASON")
	for _, h := range viewHeuristics(hs) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\n", h.Participant, h.XID, h.Action, h.Forced, h.Time, h.Reason)
	}
	tw.Flush()
}

func errStrings(errs []error) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}
