package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/sink/sqlsink"
)

// sinkDeadLettersView is the result of xactl sink dead-letters.
type sinkDeadLettersView struct {
	Sink        string               `json:"sink"`
	Progress    string               `json:"progress"`
	OnError     string               `json:"on_error"`
	DeadLetters []sqlsink.DeadLetter `json:"dead_letters"`
}

func newSinkDeadLetters(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "dead-letters NAME",
		Short: "List the bad records the sink set aside in its dead-letter table",
		Long: `With on_error: dead_letter, a record the sink cannot map (not JSON, a
required path missing, a value its column cannot hold), or whose row the
target database refuses (too long, NOT NULL, out of range, a constraint),
is written to the dead-letter table xa_sink_dead_letters in the sink's
progress target, whole (none of its rows lands), in
the same checkpoint as the records around it (exactly once), and the rest
lands. This lists them, oldest first: the record's partition and position
(the position after it, as the progress table keeps positions), its key,
its value (-o json: the bytes, base64), the error and when; ID
(incarnation/checkpoint/seq) names it for xactl sink replay.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, sc, err := g.loadSink(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			dl, err := sqlsink.ReadDeadLetters(ctx, c.ProgressTarget(sc), sc.Name, limit)
			if err != nil {
				return fmt.Errorf("sink %s: reading %s in %s: %w%s", sc.Name, sqlsink.DeadLetterTable, sc.Progress, err, setupHint(err, sc.Name))
			}
			v := sinkDeadLettersView{Sink: sc.Name, Progress: sc.Progress, OnError: sc.OnError, DeadLetters: dl}
			if v.DeadLetters == nil {
				v.DeadLetters = []sqlsink.DeadLetter{}
			}
			return g.out.result(v, func(w io.Writer) {
				if len(dl) == 0 {
					fmt.Fprintf(w, "No dead letters of sink %s (on_error: %s).\n", sc.Name, sc.OnError)
					return
				}
				tw := table(w)
				fmt.Fprintln(tw, "ID\tPARTITION\tPOSITION\tKEY\tCREATED\tERROR\tVALUE")
				for _, d := range dl {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID(), d.Partition, d.Position, shorten(string(d.Key), 24),
						d.Created.Format("2006-01-02 15:04:05"), shorten(d.Error, 80), shorten(strconv.Quote(string(d.Value)), 60))
				}
				tw.Flush()
				fmt.Fprintf(w, "%s (-o json for the whole values). ID is incarnation/checkpoint/seq: xactl sink replay %s --checkpoint N --seq M writes one again once fixed, --all every one.\n",
					plural(len(dl), "dead letter"), sc.Name)
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many (0: all)")
	return cmd
}

// shorten cuts s to n characters, with an ellipsis.
func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
