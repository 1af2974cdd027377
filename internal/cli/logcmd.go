package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/recovery/filelog"
)

func newLog(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Read and check the decision log",
		Long: `Read and check the decision log. Neither subcommand changes the log, and both
work while a transaction manager has it open.`,
	}
	cmd.AddCommand(newLogDump(g), newLogVerify(g))
	return cmd
}

// logDir needs only the log directory, not the participants.
func (g *globals) decisionLogDir() (string, error) {
	c, err := g.loadConfigLoose()
	if err != nil {
		return "", err
	}
	if c.Log.Dir == "" {
		return "", usageErr("log.dir is not set (config, XACTL_LOG_DIR or --log-dir)")
	}
	return c.Log.Dir, nil
}

type entryView struct {
	Segment  uint64            `json:"segment"`
	Offset   int64             `json:"offset"`
	Type     string            `json:"type"`
	GlobalID string            `json:"global_id,omitempty"`
	XID      string            `json:"xid,omitempty"`
	Time     string            `json:"time,omitempty"`
	Branches []string          `json:"branches,omitempty"`
	Detail   map[string]string `json:"detail,omitempty"`
	Live     bool              `json:"live"`
}

func newLogDump(g *globals) *cobra.Command {
	var live bool
	cmd := &cobra.Command{
		Use:   "dump",
		Short: "Print the decision log's records",
		Long: `Print every record of the decision log in order: commit decisions (with their
branches), forgets, heuristic outcomes (manual resolutions) and their
clearing. LIVE marks records still in force. --live prints only those.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			dir, err := g.decisionLogDir()
			if err != nil {
				return err
			}
			var all []entryView
			liveCommit := map[string]int{}
			liveHeur := map[string]int{}
			dumpErr := filelog.Dump(dir, func(e filelog.Entry) error {
				v := entryView{Segment: e.Segment, Offset: e.Offset}
				switch e.Type {
				case filelog.RecordCommit:
					v.Type, v.GlobalID = "commit", e.Commit.ID.String()
					v.Time = e.Commit.Logged.UTC().Format(time.RFC3339Nano)
					for _, b := range e.Commit.Branches {
						s := b.RM + " " + b.XID.String()
						if b.Origin.Session != 0 {
							s += fmt.Sprintf(" session=%d", b.Origin.Session)
						}
						v.Branches = append(v.Branches, s)
					}
					liveCommit[v.GlobalID] = len(all)
					v.Live = true
				case filelog.RecordForget:
					v.Type, v.GlobalID = "forget", e.ID.String()
					if i, ok := liveCommit[v.GlobalID]; ok {
						all[i].Live = false
						delete(liveCommit, v.GlobalID)
					}
				case filelog.RecordHeuristic:
					h := e.Heuristic
					v.Type, v.XID = "heuristic", h.XID.String()
					v.Time = h.Time.UTC().Format(time.RFC3339Nano)
					v.Detail = map[string]string{"participant": h.RM, "action": h.Action.String(), "forced": fmt.Sprint(h.Forced), "reason": h.Reason}
					liveHeur[v.XID] = len(all)
					v.Live = true
				case filelog.RecordClear:
					v.Type, v.XID = "clear-heuristic", e.XID.String()
					if i, ok := liveHeur[v.XID]; ok {
						all[i].Live = false
						delete(liveHeur, v.XID)
					}
				default:
					v.Type = fmt.Sprint(e.Type)
				}
				all = append(all, v)
				return nil
			})
			out := []entryView{}
			for _, v := range all {
				if !live || v.Live {
					out = append(out, v)
				}
			}
			if asJSON {
				m := map[string]any{"records": out}
				if dumpErr != nil {
					m["error"] = dumpErr.Error()
				}
				if err := writeJSON(g.stdout, m); err != nil {
					return err
				}
			} else {
				tw := table(g.stdout)
				fmt.Fprintln(tw, "SEGMENT\tOFFSET\tTYPE\tLIVE\tID\tTIME\tDETAIL")
				for _, v := range out {
					id := v.GlobalID
					if id == "" {
						id = v.XID
					}
					detail := strings.Join(v.Branches, "; ")
					if v.Detail != nil {
						detail = fmt.Sprintf("%s %s forced=%s %s", v.Detail["participant"], v.Detail["action"], v.Detail["forced"], v.Detail["reason"])
					}
					fmt.Fprintf(tw, "%d\t%d\t%s\t%v\t%s\t%s\t%s\n", v.Segment, v.Offset, v.Type, v.Live, id, v.Time, detail)
				}
				tw.Flush()
				if len(out) == 0 {
					fmt.Fprintln(g.stdout, "(no records)")
				}
			}
			if dumpErr != nil {
				return fmt.Errorf("the log is damaged (records past the damage are shown): %w\nRun xactl log verify for details", dumpErr)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&live, "live", false, "only records still in force")
	return cmd
}

func newLogVerify(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Check the decision log for damage",
		Long: `Check every segment of the decision log without changing anything. A torn tail
(an incomplete last write, left by a crash) is reported and is harmless: the
next open cuts it off. Any other damage is corruption: the transaction
manager refuses to open the log, so that no decision is lost silently.
Exit code 1 when corruption is found.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			dir, err := g.decisionLogDir()
			if err != nil {
				return err
			}
			rep, verr := filelog.Verify(dir)
			if verr != nil && !errors.Is(verr, filelog.ErrCorrupt) {
				return verr
			}
			if asJSON {
				corrupt := []string{}
				for _, c := range rep.Corruption {
					corrupt = append(corrupt, c.Error())
				}
				m := map[string]any{
					"dir": rep.Dir, "in_use": rep.InUse, "segments": len(rep.Segments),
					"records":      map[string]int{"commit": rep.Records.Commit, "forget": rep.Records.Forget, "heuristic": rep.Records.Heuristic, "clear": rep.Records.Clear},
					"live_commits": rep.LiveCommits, "live_heuristics": rep.LiveHeuristics, "corruption": corrupt, "ok": len(rep.Corruption) == 0,
				}
				if rep.TornTail != nil {
					m["torn_tail"] = fmt.Sprintf("%+v", *rep.TornTail)
				}
				if err := writeJSON(g.stdout, m); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(g.stdout, "log %s: %d segment(s); records: %d commit, %d forget, %d heuristic, %d clear; live: %d commit, %d heuristic\n",
					rep.Dir, len(rep.Segments), rep.Records.Commit, rep.Records.Forget, rep.Records.Heuristic, rep.Records.Clear, rep.LiveCommits, rep.LiveHeuristics)
				if rep.InUse {
					fmt.Fprintln(g.stdout, "note: a transaction manager has the log open; a torn tail may be a write in progress")
				}
				if rep.TornTail != nil {
					fmt.Fprintf(g.stdout, "torn tail: %+v (harmless: cut off at the next open)\n", *rep.TornTail)
				}
				for _, c := range rep.Corruption {
					fmt.Fprintln(g.stdout, "CORRUPT:", c.Error())
				}
				if len(rep.Corruption) == 0 {
					fmt.Fprintln(g.stdout, "ok")
				}
			}
			if len(rep.Corruption) > 0 {
				return &exitError{code: ExitError, err: fmt.Errorf("the decision log is corrupt: %w; keep a copy of %s and do not delete records by hand: every live commit record decides branches", verr, dir)}
			}
			return nil
		},
	}
}
