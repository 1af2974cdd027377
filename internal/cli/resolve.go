package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

func newResolve(g *globals, commit bool) *cobra.Command {
	verb, action := "rollback", xa.OutcomeRollback
	if commit {
		verb, action = "commit", xa.OutcomeCommit
	}
	var force bool
	var only, reason string
	cmd := &cobra.Command{
		Use:   verb + " XID",
		Short: fmt.Sprintf("Resolve one prepared branch by hand: %s it", verb),
		Long: fmt.Sprintf(`%s the prepared branch XID (as 'xactl list' shows it: formatID:gtrid:bqual)
on the participant that holds it (name it with --participant when the XID is
prepared on more than one, which only other applications' XIDs can be).

xactl refuses to contradict the decision log: committing a branch with no
logged commit, rolling back one whose commit is logged, or rolling back one
still inside the grace period (its coordinator may yet commit it), or
touching a branch that is not ours. --force does it anyway; the resolution
is then recorded in the decision log as a heuristic outcome, which list and
'log dump' show. Say why with --reason.`, strings.ToUpper(verb[:1])+verb[1:]),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			x, err := xa.ParseXID(args[0])
			if err != nil {
				return usageErr("%v\nGive the XID as 'xactl list' shows it: formatID:gtrid:bqual", err)
			}
			c, err := g.loadConfig(true)
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
			log, err := openLog(c.Log.Dir, logger)
			if err != nil {
				return err
			}
			defer log.Close()
			ps, errs := openParticipants(ctx, c, logger)
			defer closeAll(ps)

			// Find the participant that holds the branch.
			var holder *participant
			var prep xa.PreparedBranch
			var holders []string
			for _, p := range ps {
				if only != "" && p.cfg.Name != only {
					continue
				}
				list, err := p.rm.Recover(ctx)
				if err != nil {
					errs = append(errs, fmt.Errorf("listing %s: %w", p.cfg.Name, err))
					continue
				}
				for _, b := range list {
					if b.XID.Equal(x) && holder != p {
						holder, prep = p, b
						holders = append(holders, p.cfg.Name)
					}
				}
			}
			if holder == nil {
				printErrors(g.stderr, errs)
				return fmt.Errorf("%s is not prepared on any participant that could be listed (already resolved? see xactl list)", x)
			}
			if len(holders) > 1 {
				// Only another application can have prepared the same
				// XID on two databases: never guess which one is meant.
				return usageErr("%s is prepared on %s: choose one with --participant", x, strings.Join(holders, " and "))
			}

			// What does the decision log say?
			g0, _, ours := xa.Owned(x)
			var from xa.Origin
			logged := false
			var contradiction string
			if !ours {
				contradiction = "it is not a branch of this transaction manager (the decision log knows nothing of it)"
			} else {
				rec, ok, err := log.Lookup(ctx, g0)
				if err != nil {
					return err
				}
				// A last resource may hold the decision instead.
				for _, p := range ps {
					if ok {
						break
					}
					if ds, isStore := p.rm.(recovery.DecisionStore); isStore {
						if rec, ok, err = ds.Decision(ctx, g0); err != nil {
							return fmt.Errorf("reading the decisions stored in %s: %w", p.cfg.Name, err)
						}
					}
				}
				logged = ok
				for _, br := range rec.Branches {
					if br.XID.Equal(x) {
						from = br.Origin
					}
				}
				a, known := prep.Age(time.Now())
				switch {
				case commit && !logged:
					contradiction = "no commit is logged for its transaction: presumed abort says roll it back"
				case !commit && logged:
					contradiction = "a commit is logged for its transaction: recovery will commit it"
				case !commit && (!known || a <= time.Duration(c.Recovery.Grace)):
					contradiction = fmt.Sprintf("it is %s old, inside the %s grace period: its coordinator may still commit it", age(a, known), time.Duration(c.Recovery.Grace))
				}
				hs, err := log.Heuristics(ctx)
				if err != nil {
					return err
				}
				for _, h := range hs {
					if bytes.Equal(h.XID.Gtrid, x.Gtrid) && h.Action != action && contradiction == "" {
						contradiction = fmt.Sprintf("branch %s of the same transaction was resolved by hand with %s: the outcome would be mixed", h.XID, h.Action)
					}
				}
			}
			if contradiction != "" && !force {
				return fmt.Errorf("refusing to %s %s: %s.\nUse --force to do it anyway; it will be recorded as a heuristic outcome", verb, x, contradiction)
			}

			var opErr error
			if commit {
				opErr = holder.rm.Commit(ctx, x, from)
			} else {
				opErr = holder.rm.Rollback(ctx, x, from)
			}
			if opErr != nil {
				hint := ""
				if xa.Retryable(opErr) {
					hint = " (transient: try again shortly)"
				}
				return fmt.Errorf("%s %s on %s: %w%s", verb, x, holder.cfg.Name, opErr, hint)
			}
			forced := contradiction != ""
			if forced {
				h := xa.HeuristicRecord{RM: holder.cfg.Name, XID: x, Action: action, Forced: true, Time: time.Now(), Reason: reason}
				if err := log.LogHeuristic(ctx, h); err != nil {
					return fmt.Errorf("the branch was %s, but recording the heuristic outcome failed: %w", done(verb), err)
				}
			}
			if asJSON {
				return writeJSON(g.stdout, map[string]any{"participant": holder.cfg.Name, "xid": x.String(), "action": verb, "forced": forced, "logged_commit": logged})
			}
			fmt.Fprintf(g.stdout, "%s %s on %s", done(verb), x, holder.cfg.Name)
			if forced {
				fmt.Fprintf(g.stdout, " (forced: %s; recorded as a heuristic outcome)", contradiction)
			}
			fmt.Fprintln(g.stdout)
			if len(errs) > 0 {
				printErrors(g.stderr, errs)
				return &exitError{code: ExitError, err: errors.New("some participants could not be listed")}
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
