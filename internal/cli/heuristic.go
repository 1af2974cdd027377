package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/xa"
)

func newHeuristic(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "heuristic",
		Short: "Show and clear heuristic records (manual and server-side resolutions)",
		Long: `A heuristic record says that one branch, on one participant, was resolved
otherwise than by the protocol: forced by an operator (xactl commit/rollback
--force), or rolled back by its server while its transaction committed. The
decision log keeps each one until an operator clears it, after dealing with
the mixed outcome it may have caused; list and 'log dump --live' show them
until then.`,
	}
	cmd.AddCommand(newHeuristicList(g), newHeuristicClear(g))
	return cmd
}

type heuristicsView struct {
	Heuristics []heuristicView `json:"heuristics"`
}

func newHeuristicList(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the heuristic records not cleared",
		Long: `List the heuristic records the decision log keeps, oldest first. The log is read
without being taken.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, log, err := readLog(g)
			if err != nil {
				return err
			}
			defer log.Close()
			hs, err := log.Heuristics(cmd.Context())
			if err != nil {
				return err
			}
			v := heuristicsView{Heuristics: viewHeuristics(hs)}
			return g.out.result(v, func(w io.Writer) {
				if len(v.Heuristics) == 0 {
					fmt.Fprintln(w, "No heuristic records.")
					return
				}
				printHeuristics(w, v.Heuristics)
			})
		},
	}
}

type clearView struct {
	Participant string          `json:"participant"`
	XID         string          `json:"xid"`
	Cleared     []heuristicView `json:"cleared"`
	Remaining   []heuristicView `json:"remaining"`
}

func newHeuristicClear(g *globals) *cobra.Command {
	var rm string
	cmd := &cobra.Command{
		Use:   "clear --participant P XID",
		Short: "Clear the heuristic records of one branch on one participant",
		Long: `Clear the heuristic records of branch XID on participant P (as list and
'xactl heuristic list' show them), once the mixed outcome they record has
been dealt with. Records of the same XID on other participants stay. The
clearing is durable. The decision log is taken for writing: stop a
transaction manager that has it open first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			x, err := xa.ParseXID(args[0])
			if err != nil {
				return usageErr("%v\nGive the XID as 'xactl heuristic list' shows it: formatID:gtrid:bqual", err)
			}
			if rm == "" {
				return usageErr("--participant is required: heuristic records are kept by participant and XID")
			}
			c, err := g.loadConfig(config.Need{Log: true})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			log, err := openDecisionLog(c, forWriting, g.logger())
			if err != nil {
				return err
			}
			defer log.Close()
			hs, err := log.Heuristics(ctx)
			if err != nil {
				return err
			}
			v := clearView{Participant: rm, XID: x.String(), Cleared: []heuristicView{}}
			var others []string
			for _, h := range hs {
				switch {
				case h.RM == rm && h.XID.Equal(x):
					v.Cleared = append(v.Cleared, viewHeuristics([]xa.HeuristicRecord{h})...)
				case h.XID.Equal(x):
					others = append(others, h.RM)
				}
			}
			if len(v.Cleared) == 0 {
				msg := fmt.Sprintf("no heuristic record of %s on %s", x, rm)
				if len(others) > 0 {
					msg += fmt.Sprintf(" (there are on %s: name one with --participant)", strings.Join(others, ", "))
				}
				return fmt.Errorf("%s; xactl heuristic list shows them", msg)
			}
			if err := log.ClearHeuristic(ctx, rm, x); err != nil {
				return fmt.Errorf("clearing the heuristic records of %s on %s: %w", x, rm, err)
			}
			hs, err = log.Heuristics(ctx)
			if err != nil {
				return err
			}
			v.Remaining = viewHeuristics(hs)
			return g.out.result(v, func(w io.Writer) {
				fmt.Fprintf(w, "cleared %s of %s on %s\n", plural(len(v.Cleared), "heuristic record"), v.XID, v.Participant)
				if len(v.Remaining) > 0 {
					verb := "remain"
					if len(v.Remaining) == 1 {
						verb = "remains"
					}
					fmt.Fprintf(w, "%s %s:\n", plural(len(v.Remaining), "heuristic record"), verb)
					printHeuristics(w, v.Remaining)
				}
			})
		},
	}
	cmd.Flags().StringVar(&rm, "participant", "", "the participant the record names (required)")
	return cmd
}
