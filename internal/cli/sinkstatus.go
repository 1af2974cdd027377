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
	"github.com/xadb/xa/sink/sqlsink"
	"github.com/xadb/xa/xa"
)

// sinkBranchView is one prepared branch of a sink, as sink status and list
// show it.
type sinkBranchView struct {
	Sink        string  `json:"name"`
	XID         string  `json:"xid"`
	Target      string  `json:"target"`
	Incarnation uint64  `json:"incarnation"`
	Member      *uint32 `json:"member,omitempty"`
	Generation  *uint32 `json:"generation,omitempty"`
	Checkpoint  uint64  `json:"checkpoint"`
	// Configured: the sink is in the configuration, so what its restore
	// would do is known (unless Error says why not).
	Configured bool `json:"configured"`
	// AgeSeconds is the branch's age where the database says when it was
	// prepared (PostgreSQL).
	AgeSeconds *int64 `json:"age_seconds,omitempty"`
	// Decision is what the sink's progress target holds for the
	// checkpoint: undecided, decided commit, abort marker.
	Decision string `json:"decision,omitempty"`
	// Restore is what the sink's restore would do now (leave, commit,
	// roll back, fence and roll back), and Why.
	Restore string `json:"restore,omitempty"`
	Why     string `json:"why,omitempty"`
	// Stuck: the sink's restore would never resolve it by itself (an
	// external member's branch: only that member's Restore does).
	Stuck bool   `json:"stuck"`
	Error string `json:"error,omitempty"`
}

// newSinkBranchView describes ref, with what restore would do when bs is
// known (nil: not known).
func newSinkBranchView(c *config.Config, ref sqlsink.Ref, bs *sqlsink.BranchStatus) sinkBranchView {
	v := sinkBranchView{Sink: ref.Sink, XID: ref.XID().String(), Target: ref.Target, Incarnation: ref.Incarnation, Checkpoint: ref.Checkpoint}
	if ref.External() {
		m, gen := ref.Member(), ref.Generation()
		v.Member, v.Generation = &m, &gen
	}
	sc, ok := c.Sink(ref.Sink)
	v.Configured = ok
	if bs == nil {
		return v
	}
	if p, ok := c.Participant(ref.Target); ok && p.Driver == sqlsink.DriverPostgres {
		// MySQL keeps no prepare time: Status's age is how long this
		// process has seen the branch.
		s := int64(bs.Age / time.Second)
		v.AgeSeconds = &s
	}
	v.Decision = bs.Decision.String()
	v.Restore = bs.Action.String()
	v.Why = bs.Why
	if bs.Action == sqlsink.ActLeave && !ref.External() && bs.Decision == sqlsink.NoDecision {
		v.Why += fmt.Sprintf("; fenced once older than the %s restore grace", time.Duration(sc.RestoreGrace))
		if v.AgeSeconds == nil {
			v.Why += " (MySQL keeps no prepare time: by a running instance's clock, from when it first lists it)"
		}
	}
	v.Stuck = bs.Action == sqlsink.ActLeave && ref.External()
	return v
}

// restoreText is what restore would do, in a few words.
func (v sinkBranchView) restoreText() string {
	switch {
	case v.Error != "":
		return "? (" + v.Error + ")"
	case !v.Configured:
		return "? (sink " + v.Sink + " is not configured here; its restore resolves it)"
	case v.Restore == "":
		return "?"
	}
	return v.Restore + ": " + v.Why
}

func (v sinkBranchView) incarnationText() string {
	if v.Member != nil {
		return fmt.Sprintf("member %d gen %d", *v.Member, *v.Generation)
	}
	return fmt.Sprint(v.Incarnation)
}

func (v sinkBranchView) ageText() string {
	if v.AgeSeconds == nil {
		return "?"
	}
	return age(time.Duration(*v.AgeSeconds)*time.Second, true)
}

type sinkPartitionView struct {
	Partition string `json:"partition"`
	// Position is where reading resumes ("": the source's start); InTable
	// is false for a partition of the source the sink has not read yet.
	Position string `json:"position"`
	InTable  bool   `json:"in_table"`
	// End is where the source's partition ends now (Kafka: the high
	// watermark; a file: its size in bytes, as its positions are byte
	// offsets), Lag the records between the position and the end (a
	// file: its non-empty lines past the position).
	End *int64 `json:"end"`
	Lag *int64 `json:"lag"`
	// GroupOffset is the Kafka group's committed offset (a copy of the
	// position, committed after each checkpoint).
	GroupOffset *int64 `json:"group_offset,omitempty"`
	Epoch       int64  `json:"epoch"`
	Owner       uint64 `json:"owner"`
	Checkpoint  uint64 `json:"checkpoint"`
	Updated     string `json:"updated"`
	updated     time.Time
	// StalledSince is set when records wait in the partition (a lag)
	// and its position has not moved for the sink's stall_after: when
	// it last moved (docs/sink.md, "Liveness").
	StalledSince string `json:"stalled_since,omitempty"`
}

type sinkInstanceView struct {
	Incarnation uint64 `json:"incarnation"`
	// Member and Generation: an externally driven member's incarnation.
	Member     *uint32 `json:"member,omitempty"`
	Generation *uint32 `json:"generation,omitempty"`
	Started    string  `json:"started"`
	Host       string  `json:"host"`
	PID        int     `json:"pid"`
	Partitions int     `json:"partitions"`
}

// sinkStatusView is the result of xactl sink status.
type sinkStatusView struct {
	Sink       string              `json:"sink"`
	Source     string              `json:"source"`
	Targets    []string            `json:"targets"`
	Progress   string              `json:"progress"`
	Partitions []sinkPartitionView `json:"partitions"`
	// Lag is the sum of the partitions' lags, nil if some is unknown.
	Lag       *int64             `json:"lag"`
	Instances []sinkInstanceView `json:"instances"`
	// Branches are the sink's prepared branches; BranchesListed is false
	// when its targets could not all be opened.
	Branches       []sinkBranchView `json:"branches"`
	BranchesListed bool             `json:"branches_listed"`
	// Stuck counts the branches restore would not resolve by itself.
	Stuck int `json:"stuck"`
	// Identity says why the sink's stores are not the ones it was set up
	// with (a DSN that reaches another database): restore refuses to act
	// then, and no instance starts (exit code 3).
	Identity []string `json:"identity"`
	// Removed are targets set up for the sink and no longer configured
	// ("name (database)"): their prepared branches are neither listed nor
	// resolved (exit code 3).
	Removed []string `json:"removed"`
	// DeadLetters counts the bad records in the dead-letter table (nil:
	// it could not be read, e.g. not set up yet).
	DeadLetters *int `json:"dead_letters"`
	// StalledSince is the earliest StalledSince of the partitions ("":
	// none is stalled), Stalled those partitions.
	StalledSince string   `json:"stalled_since,omitempty"`
	Stalled      []string `json:"stalled"`
	Errors       []string `json:"errors"`
}

func newSinkStatus(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status NAME",
		Short: "Show the sink's positions, lag, instances and prepared branches",
		Long: `Per partition: the position in the progress table (where reading resumes),
the source's end (Kafka: the high watermark), the lag between them, the
epoch and the instance (incarnation) that owns it, and the last checkpoint
decided for it and when. Then the sink's instances (one row per instance
ever started; those owning no partition are counted, -o json lists them),
and the sink's prepared branches on its targets with what the sink's
restore would do with each, as an instance starting now would:

  commit                 its checkpoint is decided (the decision row)
  roll back              its checkpoint holds an abort marker
  fence and roll back    undecided, and its instance owns no partition, or
                         it is older than restore_grace: the abort marker is
                         claimed first, so no decision can commit it after
  leave                  undecided, young, of an instance that owns
                         partitions (it may be deciding it now); or an
                         external member's, which only its Restore resolves

First, the sink's identities are checked as a restore checks them: the
progress target must be the store the targets are bound to, and each target
the database the progress target recorded under its name (xactl sink setup
binds them). A mismatch is shown with what was expected and how to fix the
configuration; the branches are then not listed (the positions shown are
those of the progress table that answered). A target set up for the sink
and no longer among its targets is shown too: its prepared branches are
neither listed nor resolved.

Exit code 3 when prepared branches remain that restore would not resolve by
itself, when an identity does not match, or when a target was taken out of
the configuration while recorded; 1 when the source or the targets could
not be read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, sc, err := g.loadSink(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			v, err := readSinkStatus(ctx, c, sc, g)
			if err != nil {
				return err
			}
			if err := g.out.result(v, v.print); err != nil {
				return err
			}
			g.out.errors(v.Errors)
			switch {
			case len(v.Identity) > 0:
				return &exitError{code: ExitInDoubt, err: fmt.Errorf("sink %s: its stores are not the ones it was set up with: %s", sc.Name, strings.Join(v.Identity, "; "))}
			case len(v.Errors) > 0:
				return &exitError{code: ExitError, err: fmt.Errorf("the status of sink %s is incomplete: %s", sc.Name, plural(len(v.Errors), "error"))}
			case v.Stuck > 0 || len(v.Removed) > 0:
				return errInDoubt
			}
			return nil
		},
	}
}

// readSinkStatus reads the sink's progress, its source's ends and its
// prepared branches.
func readSinkStatus(ctx context.Context, c *config.Config, sc config.Sink, g *globals) (sinkStatusView, error) {
	v := sinkStatusView{Sink: sc.Name, Source: sourceText(sc.Source), Targets: sc.Targets, Progress: sc.Progress,
		Partitions: []sinkPartitionView{}, Instances: []sinkInstanceView{}, Branches: []sinkBranchView{}, Errors: []string{},
		Identity: []string{}, Removed: []string{}, Stalled: []string{}}
	cfg := c.SinkConfig(sc)
	cfg.Logger = g.sinkLogger()
	var st sqlsink.Status
	s, err := sqlsink.Open(ctx, cfg)
	if err == nil {
		st, err = s.Status(ctx)
		s.Close()
		v.BranchesListed = err == nil
	}
	if err != nil {
		if errors.Is(err, xa.ErrIdentity) {
			v.Identity = append(v.Identity, err.Error())
		} else {
			v.Errors = append(v.Errors, fmt.Sprintf("the sink's targets could not be read (its prepared branches are not listed): %v", err))
		}
		st, err = sqlsink.ReadStatus(ctx, c.ProgressTarget(sc), sc.Name)
		if err != nil {
			return v, fmt.Errorf("sink %s: reading its progress table in %s: %w%s", sc.Name, sc.Progress, err, setupHint(err, sc.Name))
		}
	}
	if dl, err := sqlsink.ReadDeadLetters(ctx, c.ProgressTarget(sc), sc.Name, 0); err == nil {
		n := len(dl)
		v.DeadLetters = &n
	}
	// The source's ends.
	endsByPart := map[string]partitionEnd{}
	var order []string
	er, err := newEndReader(sc)
	if err == nil {
		var ends []partitionEnd
		ends, err = er.ends(ctx)
		er.Close()
		for _, e := range ends {
			endsByPart[e.Partition] = e
			order = append(order, e.Partition)
		}
	}
	if err != nil {
		v.Errors = append(v.Errors, fmt.Sprintf("the source's ends could not be read (the lag is unknown): %v", err))
	}
	rows := map[string]sqlsink.PartitionStatus{}
	for _, p := range st.Partitions {
		rows[p.Partition] = p
		if _, ok := endsByPart[p.Partition]; !ok {
			order = append(order, p.Partition)
		}
	}
	slices.SortFunc(order, comparePartitions)
	var total int64
	lagKnown := true
	var stalledSince time.Time
	for _, name := range order {
		pv := sinkPartitionView{Partition: name}
		if p, ok := rows[name]; ok {
			pv.InTable, pv.Position, pv.Epoch, pv.Owner, pv.Checkpoint = true, p.Position, p.Epoch, p.Owner, p.Checkpoint
			pv.Updated, pv.updated = timeText(p.Updated), p.Updated
		}
		if e, ok := endsByPart[name]; ok {
			end := e.End
			pv.End = &end
			if e.Group >= 0 {
				gr := e.Group
				pv.GroupOffset = &gr
			}
			if n, ok := e.lag(pv.Position); ok {
				pv.Lag = &n
				total += n
			}
		}
		if pv.Lag == nil {
			lagKnown = false
		}
		if after := time.Duration(sc.StallAfter); after > 0 && pv.Lag != nil && *pv.Lag > 0 && pv.InTable && time.Since(pv.updated) >= after {
			pv.StalledSince = pv.Updated
			v.Stalled = append(v.Stalled, name)
			if v.StalledSince == "" || pv.updated.Before(stalledSince) {
				v.StalledSince, stalledSince = pv.Updated, pv.updated
			}
		}
		v.Partitions = append(v.Partitions, pv)
	}
	if lagKnown && len(v.Partitions) > 0 {
		v.Lag = &total
	}
	for _, in := range st.Instances {
		iv := sinkInstanceView{Incarnation: in.Incarnation, Started: timeText(in.Started), Host: in.Host, PID: in.PID, Partitions: in.Partitions}
		if ref := (sqlsink.Ref{Incarnation: in.Incarnation}); ref.External() {
			m, gen := ref.Member(), ref.Generation()
			iv.Member, iv.Generation = &m, &gen
		}
		v.Instances = append(v.Instances, iv)
	}
	for _, r := range st.Removed {
		v.Removed = append(v.Removed, r.Name+" ("+r.Where+")")
	}
	for i := range st.Branches {
		bv := newSinkBranchView(c, st.Branches[i].Ref, &st.Branches[i])
		if bv.Stuck {
			v.Stuck++
		}
		v.Branches = append(v.Branches, bv)
	}
	return v, nil
}

// setupHint adds what to do when the sink's tables may be missing.
func setupHint(err error, name string) string {
	s := strings.ToLower(err.Error())
	if strings.Contains(s, "xa_sink_") && (strings.Contains(s, "does not exist") || strings.Contains(s, "doesn't exist")) {
		return fmt.Sprintf("\nThe sink's tables are missing: xactl sink setup %s creates them", name)
	}
	return ""
}

func (v sinkStatusView) print(w io.Writer) {
	fmt.Fprintf(w, "Sink %s: %s into %s; progress in %s.\n", v.Sink, v.Source, strings.Join(v.Targets, ", "), v.Progress)
	for _, id := range v.Identity {
		fmt.Fprintf(w, "IDENTITY MISMATCH: %s\nNo instance starts and no restore acts until the configuration is fixed; the positions below are those of the progress table that answered.\n", id)
	}
	for _, r := range v.Removed {
		fmt.Fprintf(w, "Target %s was set up for the sink and is no longer among its targets: its prepared branches are neither listed nor resolved, "+
			"and restore keeps the decisions they may need (xactl sink setup %s --forget-target once it holds none).\n", r, v.Sink)
	}
	if len(v.Partitions) == 0 {
		fmt.Fprintln(w, "No partitions: the sink has not read anything yet, and the source names none.")
	} else {
		now := time.Now()
		group := slices.ContainsFunc(v.Partitions, func(p sinkPartitionView) bool { return p.GroupOffset != nil })
		tw := table(w)
		head := "PARTITION\tPOSITION\tEND\tLAG\tEPOCH\tOWNER\tCHECKPOINT\tUPDATED"
		if group {
			head = "PARTITION\tPOSITION\tEND\tLAG\tGROUP\tEPOCH\tOWNER\tCHECKPOINT\tUPDATED"
		}
		fmt.Fprintln(tw, head)
		for _, p := range v.Partitions {
			pos, epoch, owner, ckpt, upd := p.Position, fmt.Sprint(p.Epoch), fmt.Sprint(p.Owner), fmt.Sprint(p.Checkpoint), "-"
			switch {
			case !p.InTable:
				pos, epoch, owner, ckpt = "(not read yet)", "-", "-", "-"
			case pos == "":
				pos = "(start)"
			}
			if !p.updated.IsZero() && p.InTable {
				upd = fmt.Sprintf("%s (%s ago)", p.Updated, age(now.Sub(p.updated), true))
			}
			if p.InTable && p.Checkpoint == 0 {
				ckpt = "-"
			}
			lag := optInt(p.Lag)
			if group {
				lag += "\t" + optInt(p.GroupOffset)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Partition, pos, optInt(p.End), lag, epoch, owner, ckpt, upd)
		}
		tw.Flush()
		if group {
			fmt.Fprintln(w, "(GROUP: the Kafka group's committed offset, a copy of the position committed after each checkpoint; the position is the truth.)")
		}
		if v.Lag != nil {
			fmt.Fprintf(w, "Lag: %d records over %s.\n", *v.Lag, plural(len(v.Partitions), "partition"))
		} else {
			fmt.Fprintln(w, "Lag: unknown for some partitions.")
		}
		if len(v.Stalled) > 0 {
			fmt.Fprintf(w, "STALLED since %s: records wait in %s whose positions have not moved for stall_after or longer (%s). "+
				"A group that does not settle, a database refusing, a lock: the instances' logs say which; an instance exits after stall_exit.\n",
				v.StalledSince, plural(len(v.Stalled), "partition"), strings.Join(v.Stalled, ", "))
		}
	}

	fmt.Fprintln(w)
	var shown []sinkInstanceView
	for i, in := range v.Instances {
		// Those owning partitions, and the last one started.
		if in.Partitions > 0 || i == len(v.Instances)-1 {
			shown = append(shown, in)
		}
	}
	if len(shown) == 0 {
		fmt.Fprintln(w, "No instance has run yet.")
	} else {
		tw := table(w)
		fmt.Fprintln(tw, "INCARNATION\tSTARTED\tHOST\tPID\tPARTITIONS")
		for _, in := range shown {
			inc := fmt.Sprint(in.Incarnation)
			if in.Member != nil {
				inc = fmt.Sprintf("member %d gen %d", *in.Member, *in.Generation)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", inc, in.Started, in.Host, in.PID, in.Partitions)
		}
		tw.Flush()
		if n := len(v.Instances) - len(shown); n > 0 {
			fmt.Fprintf(w, "(and %s owning no partition; -o json lists them)\n", plural(n, "earlier instance"))
		}
	}

	fmt.Fprintln(w)
	switch {
	case !v.BranchesListed && len(v.Identity) > 0:
		fmt.Fprintln(w, "Prepared branches: not listed (the identity mismatch above).")
	case !v.BranchesListed:
		fmt.Fprintln(w, "Prepared branches: unknown (the targets could not be read).")
	case len(v.Branches) == 0:
		fmt.Fprintf(w, "No prepared branches of sink %s on %s.\n", v.Sink, strings.Join(v.Targets, ", "))
	default:
		tw := table(w)
		fmt.Fprintln(tw, "TARGET\tXID\tINCARNATION\tCHECKPOINT\tAGE\tDECISION\tRESTORE")
		for _, b := range v.Branches {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", b.Target, b.XID, b.incarnationText(), b.Checkpoint, b.ageText(), b.Decision, b.restoreText())
		}
		tw.Flush()
		if v.Stuck > 0 {
			fmt.Fprintf(w, "%s that the sink's restore will not resolve by itself: only the external member's own Restore (or Commit of its handle) does.\n",
				plural(v.Stuck, "branch"))
		}
	}
	if v.DeadLetters != nil && *v.DeadLetters > 0 {
		fmt.Fprintf(w, "\n%s in the dead-letter table (xactl sink dead-letters %s).\n", plural(*v.DeadLetters, "bad record"), v.Sink)
	}
}

func optInt(p *int64) string {
	if p == nil {
		return "?"
	}
	return fmt.Sprint(*p)
}
