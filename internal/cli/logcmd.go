package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

func newLog(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Create, read and check the decision log",
		Long: `Create the decision log (init), read its records (dump) and check it for damage
(verify). dump and verify change nothing and work while a transaction manager
has the log open.`,
	}
	cmd.AddCommand(newLogInit(g), newLogDump(g), newLogVerify(g))
	return cmd
}

// fileLogDir returns the directory of a file log, for the commands that
// inspect the files themselves (dump, verify).
func fileLogDir(c *config.Config) (string, error) {
	if c.Log.Kind != config.LogFile {
		return "", usageErr("log.kind %q: only a file log can be inspected", c.Log.Kind)
	}
	return c.Log.Dir, nil
}

type initView struct {
	Dir      string        `json:"dir"`
	Database string        `json:"database,omitempty"`
	Identity *identityView `json:"identity"`
	Warnings []string      `json:"warnings"`
}

func newLogInit(g *globals) *cobra.Command {
	var timeout, grace time.Duration
	var kind, dsn string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the decision log",
		Long: fmt.Sprintf(`Create the decision log in log.dir, for the node of the configuration (node:,
XACTL_NODE or --node), with its identity: a random id that every branch XID
of its transactions carries, the node, the creation time, the global
transaction timeout and the presumed-abort grace period. These are fixed for
the log's life: the transaction manager takes its timeout from the log (and
refuses a longer one), and recovery, in the application and in xactl,
applies the log's grace.

The grace must cover the timeout plus the coordinators' phase-2 retry budget
(xa.Phase2Budget): a transaction manager refuses a log whose grace is
shorter. The default, xa.GracePeriod(timeout), covers the default phase-2
settings (%d attempts of %s) with a margin.

Refused where a log exists (nothing is changed then), and where the
directory holds anything that looks like one. Every other command opens an
existing log only.

With --kind postgres or mysql (or log.kind), the log goes into the database
of --dsn (or log.dsn), where every node of a service keeps its own, so that
a live node takes a dead one's over: the tables are created the first time
(schema versioned), and the node's log, refused if the node has one. Run it
once per node.`, xa.DefaultPhase2Attempts, xa.DefaultPhase2Timeout),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kind != "" {
				g.logKind = kind
			}
			if dsn != "" {
				g.logDSN = dsn
			}
			c, err := g.loadConfig(config.Need{Log: true})
			if err != nil {
				return err
			}
			if c.Log.IsSQL() && c.Node == "" {
				return usageErr("node is not set (the node whose log to create in %s: node: in the config, XACTL_NODE or --node)", c.Log.Where())
			}
			if c.Node == "" {
				// Where a log exists, that is the error (exit 1), not the
				// node a new one would need.
				if _, err := filelog.Verify(c.Log.Dir); err == nil || errors.Is(err, filelog.ErrCorrupt) {
					return fmt.Errorf("%w: %s holds one\nxactl log init creates a log only where there is none: nothing was changed. "+
						"xactl log verify shows the identity of the log there", filelog.ErrExist, c.Log.Dir)
				}
				if err := c.Validate(config.Need{Log: true, Node: true}); err != nil {
					return usageErr("%w\n(see xactl --help for the configuration file)", err)
				}
			}
			if timeout <= 0 {
				return usageErr("--timeout must be positive")
			}
			if grace < 0 || (grace > 0 && grace <= timeout) {
				return usageErr("--grace %v must exceed the timeout %v", grace, timeout)
			}
			ident, err := xa.NewLogIdentity(c.Node, timeout, grace, time.Now())
			if err != nil {
				return usageErr("%v", err)
			}
			log, err := openDecisionLog(c, creating(ident), g.logger())
			if err != nil {
				return err
			}
			ident = log.Identity()
			if err := log.Close(); err != nil {
				return err
			}
			v := initView{Dir: c.Log.Dir, Identity: viewIdentity(ident), Warnings: []string{}}
			if c.Log.IsSQL() {
				v.Dir, v.Database = "", c.Log.Where()
			}
			need := ident.Timeout + xa.Phase2Budget(xa.DefaultPhase2Attempts, xa.DefaultPhase2Timeout, xa.DefaultRetryBackoff)
			if ident.Grace < need {
				v.Warnings = append(v.Warnings, fmt.Sprintf("the grace %v is shorter than the timeout plus the default phase-2 retry budget (%v): "+
					"a transaction manager with the default Phase2Attempts and Phase2Timeout refuses this log; configure smaller ones", ident.Grace, need))
			}
			if min := time.Duration(c.Recovery.Grace); min > ident.Grace {
				v.Warnings = append(v.Warnings, fmt.Sprintf("recovery.grace %v in the configuration is longer than the log's grace: xactl will wait %v", min, min))
			}
			return g.out.result(v, func(w io.Writer) {
				where := v.Dir
				if v.Database != "" {
					where = v.Database
				}
				fmt.Fprintf(w, "created the decision log in %s:\n", where)
				printIdentity(w, v.Identity)
				for _, s := range v.Warnings {
					fmt.Fprintln(w, "warning:", s)
				}
			})
		},
	}
	f := cmd.Flags()
	f.DurationVar(&timeout, "timeout", xa.DefaultTimeout, "global transaction timeout of the log's coordinators")
	f.DurationVar(&grace, "grace", 0, "presumed-abort grace period (default: xa.GracePeriod of the timeout)")
	f.StringVar(&kind, "kind", "", "file, postgres or mysql (overrides log.kind)")
	f.StringVar(&dsn, "dsn", "", "the log database's DSN, for --kind postgres or mysql (overrides log.dsn)")
	return cmd
}

type entryView struct {
	Segment  uint64            `json:"segment"`
	File     string            `json:"file"`
	Offset   int64             `json:"offset"`
	Type     string            `json:"type"`
	GlobalID string            `json:"global_id,omitempty"`
	XID      string            `json:"xid,omitempty"`
	Time     string            `json:"time,omitempty"`
	Branches []string          `json:"branches,omitempty"`
	Detail   map[string]string `json:"detail,omitempty"`
	Live     bool              `json:"live"`
}

func viewEntry(e filelog.Entry) entryView {
	v := entryView{Segment: e.Segment, File: e.File, Offset: e.Offset, Type: e.Type.String(), Live: e.Live}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	switch e.Type {
	case filelog.RecordIdentity:
		id := viewIdentity(e.Identity)
		v.Time = id.Created
		v.Detail = map[string]string{"id": id.ID, "node": id.Node, "timeout": id.Timeout, "grace": id.Grace}
	case filelog.RecordCommit:
		v.GlobalID, v.Time = e.Commit.ID.String(), ts(e.Commit.Logged)
		for _, b := range e.Commit.Branches {
			s := b.RM + " " + b.XID.String()
			if b.Origin.Session != 0 {
				s += fmt.Sprintf(" session=%d", b.Origin.Session)
			}
			v.Branches = append(v.Branches, s)
		}
	case filelog.RecordForget, filelog.RecordForgetAbort:
		v.GlobalID = e.ID.String()
	case filelog.RecordAbort:
		v.GlobalID, v.Time = e.Abort.ID.String(), ts(e.Abort.Logged)
		v.Detail = map[string]string{"reason": e.Abort.Reason}
	case filelog.RecordDelegation:
		v.Time = ts(e.Delegation.Logged)
		v.Detail = map[string]string{"participant": e.Delegation.Participant}
		if e.Delegation.TableID != "" {
			v.Detail["table"], v.Detail["table_identity"] = e.Delegation.Table, e.Delegation.TableID
		}
	case filelog.RecordParticipant:
		v.Time = ts(e.Participant.Logged)
		v.Detail = map[string]string{"participant": e.Participant.Name, "identity": e.Participant.Identity.ID, "where": e.Participant.Identity.Where}
	case filelog.RecordHeuristic:
		h := e.Heuristic
		v.XID, v.Time = h.XID.String(), ts(h.Time)
		v.Detail = map[string]string{"participant": h.RM, "action": h.Action.String(), "forced": fmt.Sprint(h.Forced), "reason": h.Reason}
	case filelog.RecordClear:
		v.XID = e.XID.String()
		v.Detail = map[string]string{"participant": e.RM}
	case filelog.RecordLink:
		v.Detail = map[string]string{"previous_segment": fmt.Sprint(e.Link.Segment), "previous_size": fmt.Sprint(e.Link.Size)}
	case filelog.RecordSynced:
		v.Detail = map[string]string{"synced_to": fmt.Sprint(e.Synced)}
	}
	return v
}

// detailText is an entry's detail in one line.
func (v entryView) detailText() string {
	d := v.Detail
	switch v.Type {
	case "identity":
		return fmt.Sprintf("id %s node %s timeout %s grace %s", d["id"], d["node"], d["timeout"], d["grace"])
	case "commit":
		return strings.Join(v.Branches, "; ")
	case "abort":
		return d["reason"]
	case "delegation":
		if d["table"] != "" {
			return fmt.Sprintf("decisions may be in participant %s's decision table %s (identity %s)", d["participant"], d["table"], d["table_identity"])
		}
		return "decisions may be in participant " + d["participant"] + "'s decision table"
	case "participant":
		return fmt.Sprintf("participant %s is the database with identity %s (%s)", d["participant"], d["identity"], d["where"])
	case "heuristic":
		forced := ""
		if d["forced"] == "true" {
			forced = " forced"
		}
		return fmt.Sprintf("on %s: %s%s %s", d["participant"], d["action"], forced, d["reason"])
	case "clear":
		return "heuristic records on " + d["participant"]
	case "link":
		return fmt.Sprintf("segment %s ends at byte %s", d["previous_segment"], d["previous_size"])
	case "synced":
		return fmt.Sprintf("every byte before offset %s had been synced", d["synced_to"])
	}
	return ""
}

type dumpView struct {
	Records []entryView `json:"records"`
	Error   string      `json:"error,omitempty"`
}

func newLogDump(g *globals) *cobra.Command {
	var live, marks bool
	cmd := &cobra.Command{
		Use:   "dump",
		Short: "Print the decision log's records",
		Long: `Print the decision log's identity and every record in order: commit decisions
(with their branches), abort records (presumed aborts, with who decided and
why), delegations (participants whose decision tables may hold this log's
decisions), heuristic outcomes (manual resolutions, by participant and
XID), and the records that forget or clear them. LIVE marks what is still
in force, by the replay the log itself runs. --live prints only those.
--marks also prints the sync marks (each says up to which byte of its
segment everything had been synced when it was written; they tell a torn
tail from lost data and hold no decision).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadConfig(config.Need{Log: true})
			if err != nil {
				return err
			}
			dir, err := fileLogDir(c)
			if err != nil {
				return err
			}
			v := dumpView{Records: []entryView{}}
			dump := filelog.Dump
			if marks {
				dump = filelog.DumpAll
			}
			dumpErr := dump(dir, func(e filelog.Entry) error {
				if !live || e.Live {
					v.Records = append(v.Records, viewEntry(e))
				}
				return nil
			})
			if dumpErr != nil && !errors.Is(dumpErr, filelog.ErrCorrupt) {
				return logOpenHint(dir, dumpErr)
			}
			if dumpErr != nil {
				v.Error = dumpErr.Error()
			}
			err = g.out.result(v, func(w io.Writer) {
				tw := table(w)
				fmt.Fprintln(tw, "SEGMENT\tOFFSET\tTYPE\tLIVE\tID\tTIME\tDETAIL")
				for _, r := range v.Records {
					id := r.GlobalID
					if id == "" {
						id = r.XID
					}
					seg, off := fmt.Sprint(r.Segment), fmt.Sprint(r.Offset)
					if r.Type == "identity" {
						seg, off, id = "-", "-", r.File
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\n", seg, off, r.Type, r.Live, id, r.Time, r.detailText())
				}
				tw.Flush()
				if len(v.Records) == 0 {
					fmt.Fprintln(w, "(no records)")
				}
			})
			if err != nil {
				return err
			}
			if dumpErr != nil {
				return fmt.Errorf("the log is damaged (records past the damage are shown): %w\nRun xactl log verify for details", dumpErr)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&live, "live", false, "only records still in force")
	cmd.Flags().BoolVar(&marks, "marks", false, "also the sync marks")
	return cmd
}

type tornView struct {
	File    string `json:"file"`
	Offset  int64  `json:"offset"`
	Bytes   int64  `json:"bytes"`
	Reason  string `json:"reason"`
	Meaning string `json:"meaning"`
}

type verifyView struct {
	Dir      string         `json:"dir"`
	Identity *identityView  `json:"identity"`
	InUse    bool           `json:"in_use"`
	Segments int            `json:"segments"`
	Records  map[string]int `json:"records"`
	// SyncMarks counts the sync marks, which hold no decision.
	SyncMarks      int       `json:"sync_marks"`
	LiveCommits    int       `json:"live_commits"`
	LiveAborts     int       `json:"live_aborts"`
	Delegations    int       `json:"delegations"`
	LiveHeuristics int       `json:"live_heuristics"`
	TornTail       *tornView `json:"torn_tail"`
	Corruption     []string  `json:"corruption"`
	OK             bool      `json:"ok"`
}

// tornMeaning says what a torn tail means, both ways: it is the log's
// last write, cut short.
const tornMeaning = "after a crash during a write this is harmless: nobody was told that record was durable, and the next open cuts it off. " +
	"But if this directory is a copy of a log (restored from a backup, copied or moved while in use, truncated in transit), " +
	"acknowledged commits may be lost with the cut: compare with the original before anything opens this copy"

func newLogVerify(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Check the decision log for damage, and show its identity",
		Long: `Check every segment of the decision log without changing anything, and show the
log's identity (id, node, creation time, timeout and grace).

A torn tail is a last record cut short. After a crash during a write it is
harmless: that record was never acknowledged, and the next open cuts it off.
In a copy of a log (restored, copied while in use, truncated), the same cut
may have lost acknowledged commits: check against the original first.

Any other damage is corruption: the transaction manager refuses to open the
log, so that no decision is lost silently. Exit code 1 when corruption is
found.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadConfig(config.Need{Log: true})
			if err != nil {
				return err
			}
			dir, err := fileLogDir(c)
			if err != nil {
				return err
			}
			rep, verr := filelog.Verify(dir)
			if verr != nil && !errors.Is(verr, filelog.ErrCorrupt) {
				return logOpenHint(dir, verr)
			}
			rc := rep.Records
			v := verifyView{
				Dir: rep.Dir, Identity: viewIdentity(rep.Identity), InUse: rep.InUse, Segments: len(rep.Segments),
				Records: map[string]int{"commit": rc.Commit, "forget": rc.Forget, "heuristic": rc.Heuristic, "clear": rc.Clear,
					"abort": rc.Abort, "forget-abort": rc.ForgetAbort, "delegation": rc.Delegation, "participant": rc.Participant, "link": rc.Link},
				SyncMarks:   rep.SyncMarks,
				LiveCommits: rep.LiveCommits, LiveAborts: rep.LiveAborts, Delegations: rep.Delegations, LiveHeuristics: rep.LiveHeuristics,
				Corruption: []string{}, OK: len(rep.Corruption) == 0,
			}
			if t := rep.TornTail; t != nil {
				v.TornTail = &tornView{File: t.File, Offset: t.Offset, Bytes: t.Bytes, Reason: t.Reason, Meaning: tornMeaning}
			}
			for _, c := range rep.Corruption {
				v.Corruption = append(v.Corruption, c.Error())
			}
			err = g.out.result(v, func(w io.Writer) {
				fmt.Fprintf(w, "decision log in %s\n", v.Dir)
				fmt.Fprintf(w, "identity: %s\n", v.Identity.text())
				fmt.Fprintf(w, "%s; records: %d commit, %d forget, %d heuristic, %d clear, %d abort, %d forget-abort, %d delegation, %d participant, %d link; %d sync marks\n",
					plural(v.Segments, "segment"), rc.Commit, rc.Forget, rc.Heuristic, rc.Clear, rc.Abort, rc.ForgetAbort, rc.Delegation, rc.Participant, rc.Link, v.SyncMarks)
				fmt.Fprintf(w, "live: %d commit, %d abort, %d heuristic, %d delegation\n", v.LiveCommits, v.LiveAborts, v.LiveHeuristics, v.Delegations)
				if v.InUse {
					fmt.Fprintln(w, "note: a transaction manager has the log open; a torn tail may be a write in progress")
				}
				if t := v.TornTail; t != nil {
					fmt.Fprintf(w, "torn tail at %s offset %d, %s to the end: %s.\n", t.File, t.Offset, plural(int(t.Bytes), "byte"), t.Reason)
					fmt.Fprintf(w, "  %s%s.\n", strings.ToUpper(t.Meaning[:1]), t.Meaning[1:])
				}
				for _, c := range v.Corruption {
					fmt.Fprintln(w, "CORRUPT:", c)
				}
				if v.OK {
					fmt.Fprintln(w, "ok")
				}
			})
			if err != nil {
				return err
			}
			if !v.OK {
				return &exitError{code: ExitError, err: fmt.Errorf("the decision log is corrupt: %w; keep a copy of %s and do not delete records by hand: every live commit record decides branches", verr, dir)}
			}
			return nil
		},
	}
}

// readLog opens the log read-only for a command that needs no participant.
func readLog(g *globals) (*config.Config, *decisionLog, error) {
	c, err := g.loadConfig(config.Need{Log: true})
	if err != nil {
		return nil, nil, err
	}
	l, err := openDecisionLog(c, readOnly, g.logger())
	return c, l, err
}
