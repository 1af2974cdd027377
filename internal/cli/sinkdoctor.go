package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/xadb/xa/drivers"
	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/xa"
)

// targetOf returns participant name as a target of the sink package.
func targetOf(c *config.Config, name string) sink.TargetConfig {
	p, _ := c.Participant(name)
	return sink.TargetConfig{Name: p.Name, Driver: p.Driver, DSN: p.DSN, MaxConns: p.MaxConns}
}

// checkSinkTables compares tables (the sink's) with their targets'
// catalogues (sink.CheckTables): per table, in order, how it does not fit
// (nil: it fits), or the error that kept its target's catalogue from
// being read.
func checkSinkTables(ctx context.Context, c *config.Config, tables []sink.Table) ([]*sink.TableError, []error) {
	unfit, errs := make([]*sink.TableError, len(tables)), make([]error, len(tables))
	byTarget := map[string][]int{}
	var targets []string
	for i, t := range tables {
		if byTarget[t.Target] == nil {
			targets = append(targets, t.Target)
		}
		byTarget[t.Target] = append(byTarget[t.Target], i)
	}
	for _, target := range targets {
		idx := byTarget[target]
		on := make([]sink.Table, len(idx))
		for j, i := range idx {
			on[j] = tables[i]
		}
		got, err := sink.CheckTables(ctx, targetOf(c, target), on)
		for j, i := range idx {
			if err != nil {
				errs[i] = err
			} else {
				unfit[i] = got[j]
			}
		}
	}
	return unfit, errs
}

// tableFix says how to make a table that is there fit the sink.
func tableFix(te *sink.TableError) string {
	var fix []string
	if len(te.Columns) > 0 {
		word := "column"
		if len(te.Columns) > 1 {
			word = "columns"
		}
		fix = append(fix, fmt.Sprintf("add the %s %s to %s, or map only columns it has (every checkpoint would abort; sink run refuses the table meanwhile)",
			word, strings.Join(te.Columns, ", "), te.Table))
	}
	if te.Key != nil {
		key := strings.Join(te.Key, ", ")
		fix = append(fix, fmt.Sprintf("give %s a primary key or unique index on exactly (%s), e.g. ALTER TABLE %s ADD UNIQUE (%s): without one, MySQL's ON DUPLICATE KEY UPDATE inserts a row per record and PostgreSQL's ON CONFLICT refuses; sink run refuses the table meanwhile",
			te.Table, key, te.Table, key))
	}
	if te.Relkind != "" {
		fix = append(fix, fmt.Sprintf("map the table the %s %s reads from, or another table: the sink writes ordinary or partitioned tables only", te.Relkind, te.Table))
	}
	if len(te.OtherUniques) > 0 {
		fix = append(fix, fmt.Sprintf("drop the unique keys of %s other than the upsert key's (or make the upsert key the only one), or write %s with plain INSERT: MySQL's ON DUPLICATE KEY UPDATE fires on any unique key, and a record could update another key's row; sink run refuses the table meanwhile",
			te.Table, te.Table))
	}
	return strings.Join(fix, "; ")
}

// slotNeeds is what the configuration asks of one PostgreSQL server's
// prepared-transaction slots.
type slotNeeds struct {
	sinks map[string]int // by sink
	tm    int            // the transaction manager's pools
	parts []string       // participants on the server
}

func (n slotNeeds) sinkTotal() int {
	t := 0
	for _, v := range n.sinks {
		t += v
	}
	return t
}

// slotServers asks every participant that a sink writes to where its
// kind limits prepared transactions, and adds up, per server, the slots
// every sink's instances may hold at once (instances × (1 + max_pending)
// per target on it) and the transaction manager's (each pooled session
// may hold a branch in PREPARE: the participant's max_conns, or its
// kind's default).
func slotServers(ctx context.Context, c *config.Config) (byTarget map[string]string, needs map[string]*slotNeeds, max, inUse map[string]int, errs map[string]error) {
	byTarget, needs = map[string]string{}, map[string]*slotNeeds{}
	max, inUse, errs = map[string]int{}, map[string]int{}, map[string]error{}
	asked := map[string]bool{}
	for _, s := range c.Sinks {
		for _, name := range s.Targets {
			if asked[name] {
				continue
			}
			asked[name] = true
			server, m, u, limited, err := sink.PreparedSlots(ctx, targetOf(c, name))
			switch {
			case err != nil:
				errs[name] = err
				continue
			case !limited:
				continue
			}
			byTarget[name], max[server], inUse[server] = server, m, u
		}
	}
	for _, p := range c.Participants {
		server, ok := byTarget[p.Name]
		if !ok {
			continue
		}
		n := needs[server]
		if n == nil {
			n = &slotNeeds{sinks: map[string]int{}}
			needs[server] = n
		}
		pool := p.MaxConns
		if k, ok := drivers.Lookup(p.Driver); ok && pool <= 0 {
			pool = k.DefaultMaxConns
		}
		n.tm += pool
		n.parts = append(n.parts, p.Name)
		for _, s := range c.Sinks {
			for _, t := range s.Targets {
				if t == p.Name {
					n.sinks[s.Name] += s.PreparedSlots()
				}
			}
		}
	}
	return byTarget, needs, max, inUse, errs
}

// doctorSink checks what sc needs of its targets: its bookkeeping tables
// and the tables it writes, PostgreSQL's prepared-transaction slots for
// its instances, and on MySQL what XA RECOVER holds and the PROCESS
// privilege its restore needs.
// checked holds the participants' own findings (their PROCESS privilege).
func doctorSink(ctx context.Context, c *config.Config, sc config.Sink, checked map[string][]xa.Finding, g *globals) []xa.Finding {
	var fs []xa.Finding
	add := func(name, value string, sev xa.Severity, fix string) {
		fs = append(fs, xa.Finding{Name: name, Value: value, Severity: sev, Fix: fix})
	}
	// The bookkeeping tables.
	if got, err := sink.TablesExist(ctx, targetOf(c, sc.Progress), sink.Tables()); err != nil {
		add("sink tables", fmt.Sprintf("could not be checked in %s: %v", sc.Progress, err), xa.SeverityFail,
			"see participant "+sc.Progress+"; the sink's user must be able to read its catalogue")
	} else {
		var missing []string
		for _, t := range sink.Tables() {
			if !got[t] {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			add("sink tables", fmt.Sprintf("missing in %s: %s", sc.Progress, strings.Join(missing, ", ")), xa.SeverityFail,
				fmt.Sprintf("xactl sink setup %s creates them", sc.Name))
		} else {
			add("sink tables", fmt.Sprintf("present in %s (%s)", sc.Progress, strings.Join(sink.Tables(), ", ")), xa.SeverityOK, "")
		}
	}
	// Its identities: the progress target and the targets are the
	// databases it was set up with.
	fs = append(fs, sinkIdentityFinding(ctx, c, sc, g))
	// How durable its decisions are: the progress target's own findings.
	pc, _ := c.Participant(sc.Progress)
	fs = append(fs, progressDurability(sc.Progress, pc.Driver, checked[sc.Progress])...)
	// The tables it writes: there, with every mapped column and an
	// upsert's unique key.
	tables := sc.SinkTables()
	unfit, errs := checkSinkTables(ctx, c, tables)
	for i, t := range tables {
		name := "table " + t.Target + ": " + t.Name
		switch te := unfit[i]; {
		case errs[i] != nil:
			add(name, "could not be checked: "+errs[i].Error(), xa.SeverityFail, "see participant "+t.Target+"; the sink's user must be able to read its catalogue")
		case te == nil:
			add(name, "present", xa.SeverityOK, "")
		case te.Missing:
			cols := make([]string, 0, len(t.Columns))
			for _, col := range t.Columns {
				cols = append(cols, col.Name)
			}
			fix := fmt.Sprintf("create it with the columns %s", strings.Join(cols, ", "))
			if t.Upsert {
				fix += fmt.Sprintf(" and a unique key on (%s)", strings.Join(t.Key, ", "))
			}
			add(name, "missing", xa.SeverityFail, fix)
		default:
			add(name, "present, but "+te.Problem(), xa.SeverityFail, tableFix(te))
		}
	}

	byTarget, needs, max, inUse, slotErrs := slotServers(ctx, c)
	seenServer := map[string]bool{}
	for _, target := range sc.Targets {
		if err := slotErrs[target]; err != nil {
			add("prepared-transaction slots ("+target+")", "could not be read: "+err.Error(), xa.SeverityFail, "see participant "+target)
			continue
		}
		if server, ok := byTarget[target]; ok {
			if !seenServer[server] { // slots are the server's: counted once
				seenServer[server] = true
				fs = append(fs, slotFinding(target, server, max[server], inUse[server], needs[server], sc))
			}
			continue
		}
		p, _ := c.Participant(target)
		fs = append(fs, unlimitedSinkFindings(ctx, p, sc, checked[p.Name], g)...)
	}
	return fs
}

// slotFinding compares a server's prepared-transaction limit with what
// the sinks and the transaction manager may hold prepared at once on it.
func slotFinding(target, server string, max, inUse int, n *slotNeeds, sc config.Sink) xa.Finding {
	f := xa.Finding{Name: "prepared-transaction slots (" + target + ")"}
	mine, sinks := n.sinks[sc.Name], n.sinkTotal()
	need := sinks + n.tm
	f.Value = fmt.Sprintf("max_prepared_transactions %d on %s, %d prepared now; sink %s needs %d (%s × (1 + %d pending))",
		max, server, inUse, sc.Name, mine, plural(sc.Instances, "instance"), sc.Checkpoint.MaxPending)
	if per := sc.PreparedSlots(); per > 0 && mine != per {
		f.Value += fmt.Sprintf(", for %d of its targets on this server", mine/per)
	}
	if len(n.sinks) > 1 {
		f.Value += fmt.Sprintf(", every sink on the server %d", sinks)
	}
	f.Value += fmt.Sprintf(", the transaction manager's pools %d (%s): %d in all", n.tm, strings.Join(n.parts, ", "), need)
	fix := fmt.Sprintf("set max_prepared_transactions >= %d in postgresql.conf and restart the server: PREPARE TRANSACTION fails (53200) once the slots run out", need)
	switch {
	case max < sinks:
		f.Severity = xa.SeverityFail
		f.Fix = fix + fmt.Sprintf("; below %d the sinks' own checkpoints abort again and again (or lower instances or checkpoint.max_pending)", sinks)
	case max < need:
		f.Severity, f.Fix = xa.SeverityWarn, fix+" (when the sinks and the transaction manager peak together)"
	default:
		f.Severity = xa.SeverityOK
	}
	return f
}

// unlimitedSinkFindings reports, on a target whose kind sets no limit on
// prepared branches (MySQL, MariaDB), what its recover listing holds and
// whether the PROCESS privilege is there: the sink's restore commits and
// rolls back branches of other sessions, which needs it.
func unlimitedSinkFindings(ctx context.Context, pc config.Participant, sc config.Sink, checks []xa.Finding, g *globals) []xa.Finding {
	p, err := openParticipant(ctx, pc, g.logger())
	if err != nil {
		return []xa.Finding{{Name: "XA RECOVER (" + pc.Name + ")", Value: "could not connect: " + err.Error(), Severity: xa.SeverityFail, Fix: "see participant " + pc.Name}}
	}
	defer p.close()
	var fs []xa.Finding
	list, err := p.rm.Recover(ctx)
	if err != nil {
		fs = append(fs, xa.Finding{Name: "XA RECOVER (" + pc.Name + ")", Value: err.Error(), Severity: xa.SeverityFail, Fix: "the sink's restore lists its branches with XA RECOVER: see participant " + pc.Name})
	} else {
		mine, sinks := 0, 0
		for _, b := range list {
			if ref, ok := sink.ParseXID(b.XID); ok {
				sinks++
				if ref.Sink == sc.Name {
					mine++
				}
			}
		}
		fs = append(fs, xa.Finding{Name: "XA RECOVER (" + pc.Name + ")",
			Value: fmt.Sprintf("%s prepared on the server, %d of sink %s, %d of sinks in all (MySQL sets no limit on prepared branches; each holds its row locks)",
				plural(len(list), "branch"), mine, sc.Name, sinks), Severity: xa.SeverityOK})
	}
	f := xa.Finding{Name: "PROCESS privilege (" + pc.Name + ")", Value: "unknown: the check did not say", Severity: xa.SeverityWarn}
	for _, c := range checks {
		if c.Name == "PROCESS privilege" {
			f.Value, f.Severity = c.Value, c.Severity
		}
	}
	if f.Severity != xa.SeverityOK {
		f.Fix = "the sink's restore commits a decided branch left by a crashed instance from another session, which waits until it sees " +
			"that session gone (information_schema.INNODB_TRX, fact 7): without PROCESS such branches stay prepared, holding their locks, " +
			"until the server restarts. " + strings.TrimPrefix(grantOf(checks), "; ")
	}
	return append(fs, f)
}

// grantOf returns the GRANT statement the driver's PROCESS finding
// suggests, if any.
func grantOf(checks []xa.Finding) string {
	for _, c := range checks {
		if c.Name == "PROCESS privilege" {
			if i := strings.Index(c.Fix, "GRANT PROCESS"); i >= 0 {
				return c.Fix[i:]
			}
		}
	}
	return "GRANT PROCESS ON *.* TO the sink's user"
}

// durabilityChecks name the participants' start-up findings that say how
// durable a commit of theirs is (the server's settings: MySQL has no
// per-session knob, and PostgreSQL's fsync and full_page_writes are the
// server's too).
var durabilityChecks = []string{"innodb_flush_log_at_trx_commit", "log_bin", "sync_binlog", "fsync", "full_page_writes", "synchronous_commit"}

// progressDurability repeats, for a sink, what its progress target's
// start-up check found about the durability of a commit there: the sink's
// decisions, abort markers, epochs and generation fences are commits of
// the progress target, and a decision lost in a crash after another
// target committed on its strength is a partial commit. PostgreSQL's
// synchronous_commit is no concern of the sink's: its decisions and
// fences set it on in their own transactions (docs/sink.md).
func progressDurability(progress, driver string, checks []xa.Finding) []xa.Finding {
	var fs []xa.Finding
	for _, f := range checks {
		if !slices.ContainsFunc(durabilityChecks, func(n string) bool { return strings.Contains(f.Name, n) }) {
			continue
		}
		g := f
		g.Name = "decision durability (" + progress + "): " + f.Name
		switch {
		case strings.Contains(f.Name, "synchronous_commit") && driver == sink.DriverPostgres:
			g.Value += "; the sink's decisions and fences set synchronous_commit on in their own transactions"
			g.Severity, g.Fix = xa.SeverityOK, ""
		case f.Severity != xa.SeverityOK:
			g.Fix = "the sink's decisions, abort markers and epochs are commits of " + progress +
				": one lost in a crash after another target committed on its strength is a partial commit. " + f.Fix
		}
		fs = append(fs, g)
	}
	if len(fs) == 0 {
		fs = append(fs, xa.Finding{Name: "decision durability (" + progress + ")", Value: "unknown: the participant's start-up check did not say",
			Severity: xa.SeverityWarn, Fix: "see participant " + progress})
	}
	return fs
}

// sinkIdentityFinding checks the sink's bindings as its restore does
// (sink.Sink.Verify): the progress target is the store its targets are
// bound to, each target the database the progress target recorded.
func sinkIdentityFinding(ctx context.Context, c *config.Config, sc config.Sink, g *globals) xa.Finding {
	f := xa.Finding{Name: "identity (bindings)"}
	cfg := c.SinkConfig(sc)
	cfg.Logger = g.sinkLogger()
	s, err := sink.Open(ctx, cfg)
	if err != nil {
		f.Value, f.Severity, f.Fix = "could not be checked: "+err.Error(), xa.SeverityFail, "see the participants' findings"
		return f
	}
	defer s.Close()
	removed, err := s.Verify(ctx)
	switch {
	case errors.Is(err, xa.ErrIdentity):
		f.Value, f.Severity = err.Error(), xa.SeverityFail
		f.Fix = "as the value says (xactl sink setup " + sc.Name + " binds a sink set up for the first time): no instance starts and no restore acts meanwhile"
	case err != nil:
		f.Value, f.Severity, f.Fix = "could not be checked: "+err.Error(), xa.SeverityFail, "see the participants' findings"
	case len(removed) > 0:
		var names []string
		for _, r := range removed {
			names = append(names, r.Name+" ("+r.Where+")")
		}
		f.Value = "targets set up for the sink and no longer among its targets: " + strings.Join(names, ", ")
		f.Severity = xa.SeverityWarn
		f.Fix = "their prepared branches are neither listed nor resolved, and restore keeps every decision meanwhile: put them back, or forget each once it holds no prepared branch of the sink (xactl sink setup " +
			sc.Name + " --forget-target NAME)"
	default:
		f.Value, f.Severity = fmt.Sprintf("the progress target %s and every target are the databases the sink was set up with", sc.Progress), xa.SeverityOK
	}
	return f
}
