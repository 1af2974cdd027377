package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/sink/sqlsink"
	"github.com/xadb/xa/xa"
)

type findingView struct {
	Check    string `json:"check"`
	Value    string `json:"value"`
	Severity string `json:"severity"`
	Fix      string `json:"fix,omitempty"`
}

type doctorSubject struct {
	Subject  string        `json:"subject"`
	Findings []findingView `json:"findings"`
}

type doctorView struct {
	Results []doctorSubject `json:"results"`
	// Log is the decision log's identity, when it could be read.
	Log *identityView `json:"log"`
	OK  bool          `json:"ok"`
}

func newDoctor(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check every participant and the decision log, and say how to fix what is wrong",
		Long: `For each participant: can it be reached (and log in), its version, its XA /
prepared-transaction settings, the privileges recovery needs, its clock
against this machine's, and the oldest prepared branch (ours and other
applications'), each with the fix when something is wrong. Then the decision
log: its identity (id, node, creation time, timeout, grace), intact or not,
in use, the participants it delegated decisions to, and the heuristic
records an operator has yet to clear. Then what recovery would do with the
branches of ours (xactl list shows each), by verdict, with a reason. Last,
per configured sink: its bookkeeping tables (xactl sink setup) and the
tables it writes (each there, with every mapped column and, for an upsert,
a primary key or unique index on exactly its key columns); on PostgreSQL targets, max_prepared_transactions against
what the sinks' instances may hold prepared at once (instances × (1 +
checkpoint.max_pending) per target) plus the transaction manager's pools
(max_conns, default 32) on the same server; on MySQL targets, what XA
RECOVER holds (MySQL sets no limit) and the PROCESS privilege, which the
sink's restore needs to commit branches of crashed instances.

The log is read without being taken. Exit code 1 when a check fails (a
warning does not fail).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadConfig(config.Need{Participants: true})
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			v := doctorView{OK: true}
			add := func(who string, fs []xa.Finding) {
				sub := doctorSubject{Subject: who, Findings: []findingView{}}
				for _, f := range fs {
					sub.Findings = append(sub.Findings, findingView{Check: f.Name, Value: f.Value, Severity: f.Severity.String(), Fix: f.Fix})
					v.OK = v.OK && f.Severity != xa.SeverityFail
				}
				v.Results = append(v.Results, sub)
			}
			logFindings, ident := doctorLog(ctx, c, g)
			var grace time.Duration // unknown without a log
			if ident.ID != 0 {
				v.Log = viewIdentity(ident)
				grace = max(ident.Grace, time.Duration(c.Recovery.Grace))
			}
			checked := map[string][]xa.Finding{} // by participant, for the sinks' findings
			for _, pc := range c.Participants {
				fs := doctorParticipant(ctx, pc, grace, g)
				checked[pc.Name] = fs
				add("participant "+pc.Name, fs)
			}
			add("decision log", logFindings)
			if ident.ID != 0 {
				add("recovery", doctorPlan(ctx, c, g))
			}
			for _, sc := range c.Sinks {
				add("sink "+sc.Name, doctorSink(ctx, c, sc, checked, g))
			}
			err = g.out.result(v, func(w io.Writer) {
				for i, sub := range v.Results {
					if i > 0 {
						fmt.Fprintln(w)
					}
					fmt.Fprintln(w, sub.Subject)
					tw := table(w)
					fmt.Fprintln(tw, "  CHECK\tVALUE\tSTATUS\tFIX")
					for _, f := range sub.Findings {
						fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Check, f.Value, f.Severity, f.Fix)
					}
					tw.Flush()
				}
			})
			if err != nil {
				return err
			}
			if !v.OK {
				return &exitError{code: ExitError, err: errors.New("some checks failed: see FIX")}
			}
			return nil
		},
	}
}

func doctorParticipant(ctx context.Context, pc config.Participant, grace time.Duration, g *globals) []xa.Finding {
	fail := func(name, value, fix string) []xa.Finding {
		return []xa.Finding{{Name: name, Value: value, Severity: xa.SeverityFail, Fix: fix}}
	}
	p, err := openParticipant(ctx, pc, g.logger())
	var ie *xa.IdentityError
	if errors.As(err, &ie) {
		return fail("identity", strings.TrimPrefix(ie.Error(), "xa: "), ie.Fix)
	}
	if err != nil {
		fix := "check the DSN, that the server runs and that this host may connect"
		var ce *xa.ConnectError
		if errors.As(err, &ce) {
			return fail("connect", fmt.Sprintf("%s: %v", ce.What, ce.Err), ce.Fix)
		}
		return fail("connect", err.Error(), fix)
	}
	defer p.close()
	fs, _ := p.checker.Check(ctx) // the findings say what failed; the clock's among them
	list, err := p.rm.Recover(ctx)
	if err != nil {
		return append(fs, xa.Finding{Name: "prepared branches", Value: explainAll([]error{err})[0].Error(), Severity: xa.SeverityFail, Fix: "recovery needs to list prepared branches: see the privilege findings"})
	}
	now := time.Now()
	var oursN, foreignN, sinkN int
	var oursOldest, foreignOldest time.Duration
	foreignUnknownAge := false
	sinks := map[string]int{}
	for _, b := range list {
		a, known := b.Age(now)
		if _, ok := xa.ParseOwned(b.XID); ok {
			oursN++
			oursOldest = max(oursOldest, a)
			continue
		}
		if ref, ok := sqlsink.ParseXID(b.XID); ok {
			sinkN++
			sinks[ref.Sink]++
			continue
		}
		foreignN++
		if known {
			foreignOldest = max(foreignOldest, a)
		} else {
			foreignUnknownAge = true
		}
	}
	f := xa.Finding{Name: "prepared branches (ours)", Value: fmt.Sprintf("%d, oldest %s", oursN, age(oursOldest, oursN > 0)), Severity: xa.SeverityOK}
	if oursN > 0 && grace > 0 && oursOldest > grace {
		f.Severity, f.Fix = xa.SeverityWarn, "in doubt beyond the grace period, holding locks: see xactl list, run xactl recover (is a transaction manager's recovery running?)"
	}
	fs = append(fs, f)
	if sinkN > 0 {
		var per []string
		for _, name := range slices.Sorted(maps.Keys(sinks)) {
			per = append(per, fmt.Sprintf("%s %d", name, sinks[name]))
		}
		fs = append(fs, xa.Finding{Name: "prepared branches (sinks)", Value: fmt.Sprintf("%d (%s): each sink's restore resolves them; xactl sink status NAME", sinkN, strings.Join(per, ", ")),
			Severity: xa.SeverityOK})
	}
	f = xa.Finding{Name: "prepared branches (others)", Value: fmt.Sprintf("%d", foreignN), Severity: xa.SeverityOK}
	if foreignN > 0 {
		f.Value += ", oldest " + age(foreignOldest, foreignOldest > 0)
		if foreignUnknownAge {
			f.Value += " (age unknown for some)"
		}
		f.Severity, f.Fix = xa.SeverityWarn, "other applications' prepared branches hold locks (and in PostgreSQL hold back VACUUM); their owner must resolve them (xactl commit/rollback --force as a last resort)"
	}
	return append(fs, f)
}

// doctorLog checks the decision log without taking it, and returns its
// identity when it could be read.
func doctorLog(ctx context.Context, c *config.Config, g *globals) ([]xa.Finding, xa.LogIdentity) {
	var none xa.LogIdentity
	var fs []xa.Finding
	if c.Log.IsSQL() {
		sfs, s, closeDB := doctorSQLLog(ctx, c, g)
		defer closeDB()
		if s == nil {
			return sfs, none
		}
		fs = sfs
	} else if dfs, ok, ident := doctorLogDir(c); !ok {
		return dfs, ident
	} else {
		fs = dfs
	}
	return doctorLogRecords(ctx, c, g, fs)
}

// doctorLogDir checks a file log's directory; ok: it holds a sound log
// (a damaged one's identity is returned when it could be read).
func doctorLogDir(c *config.Config) (_ []xa.Finding, ok bool, _ xa.LogIdentity) {
	var none xa.LogIdentity
	if c.Log.Dir == "" {
		return []xa.Finding{{Name: "location", Value: "not set", Severity: xa.SeverityWarn, Fix: "set log.dir (XACTL_LOG_DIR, --log-dir) to check the decision log"}}, false, none
	}
	st, err := os.Stat(c.Log.Dir)
	if err != nil {
		return []xa.Finding{{Name: "location", Value: err.Error(), Severity: xa.SeverityFail,
			Fix: "point log.dir at the transaction manager's decision log (a local, durable disk), or create one there with xactl log init"}}, false, none
	}
	if !st.IsDir() {
		return []xa.Finding{{Name: "location", Value: c.Log.Dir + " is not a directory", Severity: xa.SeverityFail, Fix: "point log.dir at a directory"}}, false, none
	}
	fs := []xa.Finding{{Name: "location", Value: c.Log.Dir, Severity: xa.SeverityOK}}
	rep, err := filelog.Verify(c.Log.Dir)
	switch {
	case errors.Is(err, filelog.ErrNoLog):
		return append(fs, xa.Finding{Name: "integrity", Value: "no decision log here (no IDENTITY, no segment)", Severity: xa.SeverityWarn,
			Fix: "point log.dir at the transaction manager's decision log, or create one with xactl log init; the other commands refuse a directory without a log"}), false, none
	case errors.Is(err, filelog.ErrCorrupt):
		fs = append(fs, xa.Finding{Name: "integrity", Value: err.Error(), Severity: xa.SeverityFail, Fix: "the log is corrupt: keep a copy and inspect it with xactl log verify / log dump; never delete records by hand"})
		if rep.Identity.ID != 0 {
			fs = append(fs, xa.Finding{Name: "identity", Value: viewIdentity(rep.Identity).text(), Severity: xa.SeverityOK})
		}
		return fs, false, rep.Identity
	case err != nil:
		return append(fs, xa.Finding{Name: "integrity", Value: err.Error(), Severity: xa.SeverityFail, Fix: "the log cannot be read: check permissions"}), false, none
	}
	integ := xa.Finding{Name: "integrity", Value: fmt.Sprintf("ok, %s", plural(len(rep.Segments), "segment")), Severity: xa.SeverityOK}
	if t := rep.TornTail; t != nil && !rep.InUse {
		integ.Value = fmt.Sprintf("torn tail: the last %s of %s were never synced whole (%s)", plural(int(t.Bytes), "byte"), t.File, t.Reason)
		integ.Severity, integ.Fix = xa.SeverityWarn, tornMeaning
	}
	return append(fs, integ), true, rep.Identity
}

// doctorLogRecords adds to fs the log's identity and records, read
// without taking the log.
func doctorLogRecords(ctx context.Context, c *config.Config, g *globals, fs []xa.Finding) ([]xa.Finding, xa.LogIdentity) {
	var none xa.LogIdentity
	// The identity, the node and the records, from a snapshot: the node is
	// checked here rather than refused, to report it.
	cc := *c
	cc.Node = ""
	if c.Log.IsSQL() {
		cc.Node = c.Node // one of many logs: the configured node's
	}
	log, err := openDecisionLog(&cc, readOnly, g.logger())
	if err != nil {
		return append(fs, xa.Finding{Name: "identity", Value: err.Error(), Severity: xa.SeverityFail, Fix: "see xactl log verify, or xactl nodes"}), none
	}
	defer log.Close()
	ident := log.Identity()
	idf := xa.Finding{Name: "identity", Value: viewIdentity(ident).text(), Severity: xa.SeverityOK}
	check := *c
	if err := check.CheckIdentity(ident); err != nil {
		idf.Severity, idf.Fix = xa.SeverityFail, err.Error()
	}
	fs = append(fs, idf)
	if g := time.Duration(c.Recovery.Grace); g > 0 {
		f := xa.Finding{Name: "recovery.grace", Value: fmt.Sprintf("%v: lengthens the log's grace %v", g, ident.Grace), Severity: xa.SeverityOK}
		if g <= ident.Grace {
			f.Value = fmt.Sprintf("%v: not longer than the log's grace %v, so ignored", g, ident.Grace)
			f.Severity, f.Fix = xa.SeverityWarn, "remove recovery.grace, or set it longer than the log's grace: it can only lengthen it"
		}
		fs = append(fs, f)
	}
	commits, err1 := log.Commits(ctx)
	aborts, err2 := log.Aborts(ctx)
	hs, err3 := log.Heuristics(ctx)
	ds, err4 := log.Delegations(ctx)
	recorded, err5 := log.Participants(ctx)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return append(fs, xa.Finding{Name: "records", Value: err.Error(), Severity: xa.SeverityFail, Fix: "see xactl log verify"}), ident
	}
	fs = append(fs, xa.Finding{Name: "records", Value: fmt.Sprintf("%s, %s", plural(len(commits), "live commit record"), plural(len(aborts), "abort record")), Severity: xa.SeverityOK})
	hf := xa.Finding{Name: "heuristic records", Value: fmt.Sprint(len(hs)), Severity: xa.SeverityOK}
	if len(hs) > 0 {
		hf.Severity, hf.Fix = xa.SeverityWarn, "branches were resolved otherwise than by the protocol: review them with xactl heuristic list, then xactl heuristic clear"
	}
	fs = append(fs, hf)
	for _, r := range recorded {
		f := xa.Finding{Name: "participant identity", Value: fmt.Sprintf("%s is the database %s", r.Name, r.Identity), Severity: xa.SeverityOK}
		if _, ok := c.Participant(r.Name); !ok {
			f.Value += ", which is not configured"
			f.Severity = xa.SeverityWarn
			f.Fix = fmt.Sprintf("records naming participant %s are kept until it is configured (with a DSN reaching that database)", r.Name)
		}
		fs = append(fs, f)
	}
	for _, d := range ds {
		f := xa.Finding{Name: "delegation", Value: fmt.Sprintf("decisions may be in participant %s's decision table", d.Participant), Severity: xa.SeverityOK}
		if d.TableID != "" {
			f.Value = fmt.Sprintf("decisions may be in participant %s's decision table %s (identity %s)", d.Participant, d.Table, d.TableID)
		}
		if p, ok := c.Participant(d.Participant); !ok || p.DecisionTable == "" {
			f.Value += ", which is not configured"
			f.Severity = xa.SeverityFail
			f.Fix = fmt.Sprintf("recovery is blocked (no presumed abort) until participant %s is configured with its decision_table", d.Participant)
		}
		fs = append(fs, f)
	}
	if c.Log.IsSQL() {
		return fs, ident // its leases are findings of their own
	}
	u := xa.Finding{Name: "in use", Value: "no", Severity: xa.SeverityOK}
	if log.inUse {
		u.Value = "yes: a transaction manager has it open"
	}
	return append(fs, u), ident
}

// verdictAdvice says, per verdict of a branch of ours, how worrying it is
// and what to do; verdicts not listed are not reported.
var verdictAdvice = []struct {
	v   recovery.Verdict
	sev xa.Severity
	fix string
}{
	{recovery.Commit, xa.SeverityWarn, "a commit decision waits to be carried out: is the transaction manager's recovery running? xactl recover does it"},
	{recovery.Rollback, xa.SeverityWarn, "presumed abort is due: is the transaction manager's recovery running? xactl recover does it"},
	{recovery.Wait, xa.SeverityOK, ""},
	{recovery.OtherLog, xa.SeverityWarn, "their decisions are in another decision log: recover them with it (xactl --log-dir)"},
	{recovery.Predates, xa.SeverityWarn, "they began before this log was created: their decisions are in an earlier log; recover them with it"},
	{recovery.Blocked, xa.SeverityWarn, "configure the participants the log delegated decisions to, with their decision_table"},
	{recovery.Anomaly, xa.SeverityWarn, "a commit record does not list the branch: investigate before resolving it by hand"},
}

// doctorPlan reports what recovery would do with the branches of ours, by
// verdict, with the first reason of each.
func doctorPlan(ctx context.Context, c *config.Config, g *globals) []xa.Finding {
	fail := func(err error) []xa.Finding {
		return []xa.Finding{{Name: "plan", Value: err.Error(), Severity: xa.SeverityFail, Fix: "see the decision log's findings"}}
	}
	cc := *c
	if !c.Log.IsSQL() {
		cc.Node = "" // a node that is not the log's is the identity finding's
	}
	logger := g.logger()
	env, err := openRecovery(ctx, &cc, readOnly, logger)
	if err != nil {
		return fail(err)
	}
	defer env.Close()
	ps, sc := env.ps, env.sc
	rep, err := sc.Plan(ctx)
	if err != nil {
		return fail(err)
	}
	var fs []xa.Finding
	for _, name := range slices.Sorted(maps.Keys(rep.Mismatched)) {
		err := rep.Mismatched[name]
		f := xa.Finding{Name: "identity of " + name, Value: strings.TrimPrefix(err.Error(), "xa: "), Severity: xa.SeverityFail,
			Fix: "recovery does nothing on it and keeps every record naming it: point the configuration at the store the decision log recorded"}
		var ie *xa.IdentityError
		if errors.As(err, &ie) && ie.Fix != "" {
			f.Fix = ie.Fix
		}
		fs = append(fs, f)
	}
	for _, a := range verdictAdvice {
		n, example := 0, ""
		for _, b := range rep.Branches {
			if b.Verdict != a.v {
				continue
			}
			n++
			if example == "" {
				v := viewBranch(b, sc.Grace(), nil)
				why := v.Reason
				if why == "" {
					why = v.Action
				}
				example = fmt.Sprintf("%s on %s: %s", v.XID, v.Participant, why)
			}
		}
		if n > 0 {
			fs = append(fs, xa.Finding{Name: "branches: " + a.v.String(), Value: fmt.Sprintf("%d; e.g. %s", n, example), Severity: a.sev, Fix: a.fix})
		}
	}
	// What could not be listed is not known: never "none" there.
	var missing []string
	for _, m := range unlisted(ps, rep) {
		missing = append(missing, m.Participant+" "+m.Error)
	}
	switch {
	case len(missing) > 0:
		value := "not known: " + strings.Join(missing, "; ")
		if len(fs) == 0 && len(rep.Participants) > 0 {
			value = "none prepared on " + strings.Join(rep.Participants, ", ") + "; " + value
		}
		fs = append(fs, xa.Finding{Name: "branches of ours", Value: value, Severity: xa.SeverityFail,
			Fix: "nothing is known about the prepared branches of a participant that could not be listed: see its findings"})
	case len(fs) == 0:
		fs = append(fs, xa.Finding{Name: "branches of ours", Value: "none prepared on " + strings.Join(rep.Participants, ", "), Severity: xa.SeverityOK})
	}
	return fs
}
