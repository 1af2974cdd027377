package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/sqllog"
	"github.com/xadb/xa/xa"
)

// openTimeout bounds opening a log database (the commands' own context
// bounds what they do with it).
const openTimeout = 30 * time.Second

// operatorName is who runs xactl.
func operatorName() string {
	who := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = u.Username
	}
	if who == "" {
		who = "unknown"
	}
	return who
}

// operator names who runs xactl, and where, for the events it records.
func operator() string {
	host, _ := os.Hostname()
	return operatorName() + "@" + host
}

// sqlStore opens the log database of the configuration as a sqllog.Store.
func sqlStore(c *config.Config, logger *slog.Logger) (*sqllog.Store, func(), error) {
	db, d, err := logdb.Open(c.Log.Kind, c.Log.DSN)
	if err != nil {
		return nil, nil, &exitError{code: ExitUsage, err: err}
	}
	s, err := sqllog.NewStore(db, d, sqllog.Options{Logger: logger, LeaseTTL: time.Duration(c.Log.LeaseTTL),
		Holder: sqllog.NewHolder("xactl:" + operatorName())})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return s, func() { db.Close() }, nil
}

// sqlNode returns the node whose log a command acts on: the configured
// node, or the only log's in the database.
func sqlNode(ctx context.Context, c *config.Config, s *sqllog.Store) (string, error) {
	if c.Node != "" {
		return c.Node, nil
	}
	logs, err := s.Logs(ctx)
	if err != nil {
		return "", sqlOpenHint(c, err)
	}
	var nodes []string
	for _, l := range logs {
		nodes = append(nodes, l.Identity.Node)
	}
	if len(nodes) == 1 {
		return nodes[0], nil
	}
	return "", usageErr("the %s holds the logs of %d nodes (%s): name the node (node:, XACTL_NODE or --node); xactl nodes lists them",
		c.Log.Where(), len(nodes), strings.Join(nodes, ", "))
}

// openSQLLog opens the configured node's log in the log database: created
// (log init), or without its lease, as xactl does beside the live nodes:
// it reads, records aborts (a rollback takes the fence), heuristic records
// and forgets, and never presumes abort (the holder's recovery does).
func openSQLLog(c *config.Config, mode logMode, logger *slog.Logger) (*decisionLog, error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	s, closeDB, err := sqlStore(c, logger)
	if err != nil {
		return nil, err
	}
	node := ""
	if mode.create != nil {
		// Made, not taken: its lease stays free, with nothing in doubt.
		ident, err := s.CreateLog(ctx, *mode.create)
		if errors.Is(err, sqllog.ErrExist) {
			closeDB()
			return nil, fmt.Errorf("%w\nxactl log init creates a node's log only where it has none: nothing was changed. xactl nodes lists the logs there", err)
		}
		if err != nil {
			closeDB()
			return nil, sqlOpenHint(c, err)
		}
		node = ident.Node
	} else if node, err = sqlNode(ctx, c, s); err != nil {
		closeDB()
		return nil, err
	}
	l, err := s.Observe(ctx, node)
	if err != nil {
		closeDB()
		return nil, sqlOpenHint(c, err)
	}
	return &decisionLog{RecoveryLog: l, where: fmt.Sprintf("node %s's log in %s", node, c.Log.Where()),
		close: func() error { err := l.Close(); closeDB(); return err }}, nil
}

// sqlOpenHint adds to an error opening a SQL log what the operator should
// do.
func sqlOpenHint(c *config.Config, err error) error {
	switch {
	case errors.Is(err, sqllog.ErrNoLog):
		return fmt.Errorf("%w\nxactl opens only an existing log: check log.dsn (and node:); a node's log is made once, by xactl log init --kind %s --dsn ...", err, c.Log.Kind)
	case errors.Is(err, sqllog.ErrSchema):
		return fmt.Errorf("%w\nthis xactl reads schema version %d; use the xactl of the version that made the tables", err, sqllog.SchemaVersion)
	}
	return err
}

// nodeView is one log of the log database, as xactl nodes shows it.
type nodeView struct {
	Node  string `json:"node"`
	LogID string `json:"log_id"`
	// State: held, expired or free; Holder holds (or held) the lease,
	// Kind says how it took it (own, takeover, manual).
	State      string `json:"state"`
	Holder     string `json:"holder"`
	Kind       string `json:"kind"`
	Epoch      int64  `json:"epoch"`
	Clean      bool   `json:"clean"`
	RenewedAgo string `json:"renewed_ago"`
	ExpiresIn  string `json:"expires_in"`
	// InDoubt counts the log's prepared branches on the participants;
	// Undecided those of them without a decision (no commit record, no
	// abort record); nil when the participants could not all be listed.
	InDoubt   *int   `json:"in_doubt"`
	Undecided *int   `json:"undecided"`
	Commits   int    `json:"commit_records"`
	Aborts    int    `json:"abort_records"`
	ClockSkew string `json:"node_clock_offset"`
	LastEvent string `json:"last_event,omitempty"`
}

type nodesView struct {
	Database string     `json:"database"`
	Nodes    []nodeView `json:"nodes"`
	Errors   []string   `json:"errors"`
}

func newNodes(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "List the nodes' decision logs in the shared log database, with their leases",
		Long: `With a decision log in PostgreSQL or MySQL (log.kind postgres or mysql), every
node of the service keeps its log in one database, and a live node takes a
dead one's over. For each log: its node and id; its lease: held (by whom, how
taken: own, takeover, manual), expired (its holder stopped renewing it, by the
database's clock: a live node takes it over) or free (released); the epoch
decision writes must carry; when it was renewed and when it expires; the
log's branches prepared on the participants (in doubt) and those of them with
no commit decision (undecided); its commit and abort records; the node's clock
offset to the database's, as the node measured it; and the last lease event
(a takeover names who made it).

Works beside the running nodes: nothing is taken. Exit code 3 when a lease
has expired and nobody took it over yet, or branches are in doubt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.loadConfig(config.Need{Log: true})
			if err != nil {
				return err
			}
			if !c.Log.IsSQL() {
				return usageErr("xactl nodes needs a shared decision log: log.kind postgres or mysql (this one is %s, one node's)", c.Log.Kind)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			logger := g.logger()
			s, closeDB, err := sqlStore(c, logger)
			if err != nil {
				return err
			}
			defer closeDB()
			logs, err := s.Logs(ctx)
			if err != nil {
				return sqlOpenHint(c, err)
			}
			v := nodesView{Database: c.Log.Where(), Nodes: []nodeView{}, Errors: []string{}}
			ps := openParticipants(ctx, c, logger)
			defer ps.Close()
			for _, e := range ps.openErrors() {
				v.Errors = append(v.Errors, e.Error())
			}
			events, _ := s.Events(ctx, "", 0)
			attention := false
			for _, st := range logs {
				nv := nodeView{Node: st.Identity.Node, LogID: st.Identity.ID.String(), State: st.State, Holder: st.Holder, Kind: st.Kind,
					Epoch: st.Epoch, Clean: st.Clean, RenewedAgo: age(st.RenewedAgo, st.Kind != "none"), ExpiresIn: "-",
					Commits: st.Commits, Aborts: st.Aborts, ClockSkew: st.NodeOffset.Round(time.Millisecond).String()}
				switch st.State {
				case sqllog.StateHeld:
					nv.ExpiresIn = age(st.ExpiresIn, true)
				case sqllog.StateExpired:
					nv.ExpiresIn = "expired " + age(-st.ExpiresIn, true) + " ago"
					attention = true
				}
				for _, e := range slices.Backward(events) {
					if e.Node == st.Identity.Node {
						nv.LastEvent = fmt.Sprintf("%s %s epoch %d by %s: %s", e.At.UTC().Format(time.RFC3339), e.Action, e.Epoch, e.Holder+e.Previous, e.Reason)
						if e.Action == "acquire" || e.Action == "takeover" {
							nv.LastEvent = fmt.Sprintf("%s %s epoch %d by %s: %s", e.At.UTC().Format(time.RFC3339), e.Action, e.Epoch, e.Holder, e.Reason)
						}
						break
					}
				}
				if len(ps.open) > 0 {
					inDoubt, undecided, err := countBranches(ctx, c, ps, s, st.Identity.Node, logger)
					if err != nil {
						v.Errors = append(v.Errors, fmt.Sprintf("node %s: %v", st.Identity.Node, err))
					} else {
						nv.InDoubt, nv.Undecided = &inDoubt, &undecided
						attention = attention || inDoubt > 0
					}
				}
				v.Nodes = append(v.Nodes, nv)
			}
			err = g.out.result(v, func(w io.Writer) {
				fmt.Fprintf(w, "Decision logs in %s:\n", v.Database)
				tw := table(w)
				fmt.Fprintln(tw, "NODE\tLOG\tLEASE\tHOLDER\tEPOCH\tRENEWED\tEXPIRES\tIN DOUBT\tUNDECIDED\tRECORDS\tCLOCK")
				for _, n := range v.Nodes {
					state := n.State
					if n.State == sqllog.StateHeld || n.State == sqllog.StateExpired {
						state += " (" + n.Kind + ")"
					}
					if n.State == sqllog.StateFree && n.Clean {
						state += " (clean)"
					}
					count := func(p *int) string {
						if p == nil {
							return "?"
						}
						return fmt.Sprint(*p)
					}
					holder := n.Holder
					if holder == "" {
						holder = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d commit, %d abort\t%s\n", n.Node, n.LogID, state, holder, n.Epoch,
						n.RenewedAgo, n.ExpiresIn, count(n.InDoubt), count(n.Undecided), n.Commits, n.Aborts, n.ClockSkew)
				}
				tw.Flush()
				for _, n := range v.Nodes {
					if n.LastEvent != "" {
						fmt.Fprintf(w, "%s: last event %s\n", n.Node, n.LastEvent)
					}
				}
			})
			if err != nil {
				return err
			}
			g.out.errors(v.Errors)
			if attention {
				return errInDoubt
			}
			return nil
		},
	}
}

// countBranches counts the prepared branches of node's log on the
// participants (a plan of its recovery, without the lease) and those of
// them without a commit decision.
func countBranches(ctx context.Context, c *config.Config, ps *participants, s *sqllog.Store, node string, logger *slog.Logger) (inDoubt, undecided int, err error) {
	l, err := s.Observe(ctx, node)
	if err != nil {
		return 0, 0, err
	}
	defer l.Close()
	cc := *c
	cc.Node, cc.Recovery.Nodes = node, nil
	sc, err := newScanner(&cc, ps, l, logger)
	if err != nil {
		return 0, 0, err
	}
	rep, err := sc.Plan(ctx)
	if err != nil {
		return 0, 0, err
	}
	if len(rep.Unlisted) > 0 {
		return 0, 0, fmt.Errorf("%d participants could not be listed", len(rep.Unlisted))
	}
	for _, b := range rep.Branches {
		if b.ID.Node != node || b.Log != l.Identity().ID {
			continue
		}
		inDoubt++
		if !b.Logged && !b.AbortLogged {
			undecided++
		}
	}
	return inDoubt, undecided, nil
}

// takeoverView is what xactl recover --takeover did.
type takeoverView struct {
	Node          string     `json:"node"`
	Log           string     `json:"log"`
	Previous      string     `json:"previous_holder"`
	PreviousEpoch int64      `json:"previous_epoch"`
	By            string     `json:"by"`
	Committed     int        `json:"committed"`
	RolledBack    int        `json:"rolled_back"`
	Aborted       int        `json:"aborts_recorded"`
	Scans         int        `json:"scans"`
	Resolved      string     `json:"resolved_in,omitempty"`
	Released      bool       `json:"released"`
	Error         string     `json:"error,omitempty"`
	Report        reportView `json:"last_scan"`
}

// recoverTakeover is xactl recover --takeover: it takes the configured
// node's log over if its lease has expired (or was released), recovers it
// at once (no grace: the database refuses the previous holder's decisions
// since), until nothing of it is in doubt or ctx ends, and releases it;
// the takeover is recorded with who made it.
func recoverTakeover(ctx context.Context, g *globals, c *config.Config, reason string) error {
	logger := g.logger()
	s, closeDB, err := sqlStore(c, logger)
	if err != nil {
		return err
	}
	defer closeDB()
	node, err := sqlNode(ctx, c, s)
	if err != nil {
		return err
	}
	logs, err := s.Logs(ctx)
	if err != nil {
		return sqlOpenHint(c, err)
	}
	var st *sqllog.LogStatus
	for i := range logs {
		if logs[i].Identity.Node == node {
			st = &logs[i]
		}
	}
	if st == nil {
		return sqlOpenHint(c, fmt.Errorf("%w for node %s in %s", sqllog.ErrNoLog, node, c.Log.Where()))
	}
	why := "xactl recover --takeover by " + operator()
	if reason != "" {
		why += ": " + reason
	}
	taken, err := s.TakeOverNode(ctx, node, sqllog.TakeoverOptions{Manual: true, Reason: why})
	if errors.Is(err, sqllog.ErrLeaseHeld) {
		return fmt.Errorf("%w\nA live process holds node %s's log: its recovery resolves its branches, and a live node's transactions are never taken over. "+
			"xactl recover (without --takeover) commits what is decided beside it; xactl nodes shows the leases", err, node)
	}
	if err != nil {
		return sqlOpenHint(c, err)
	}
	ps := openParticipants(ctx, c, logger)
	defer ps.Close()
	tk, err := recovery.NewTakeover(recovery.TakeoverConfig{Store: noStore{}, Participants: ps.rms(), Unreachable: ps.unreachable,
		Interval: time.Second, Logger: logger})
	if err != nil {
		taken.Close()
		return err
	}
	e := recovery.ExpiredLease{Log: st.Identity.ID, Node: node, Holder: st.Holder, Epoch: st.LeaseEpoch, Released: st.State == sqllog.StateFree, Since: -st.ExpiresIn}
	var last recovery.Report
	r := tk.Recover(ctx, taken, e, func(rep recovery.Report) { last = rep })
	v := takeoverView{Node: node, Log: st.Identity.ID.String(), Previous: st.Holder, PreviousEpoch: st.LeaseEpoch, By: why,
		Committed: r.Committed, RolledBack: r.RolledBack, Aborted: r.Aborted, Scans: r.Scans, Released: r.Released}
	if r.Resolved > 0 {
		v.Resolved = r.Resolved.Round(time.Millisecond).String()
	}
	if r.Err != nil {
		v.Error = r.Err.Error()
	}
	sc, err := newScanner(c, ps, taken, logger)
	if err != nil {
		return err
	}
	v.Report = viewReport(ctx, c, sc, ps, last, false, g.sinkLogger())
	err = g.out.result(v, func(w io.Writer) {
		fmt.Fprintf(w, "took node %s's log %s over from %s (epoch %d), recorded as: %s\n", v.Node, v.Log, orNone(v.Previous), v.PreviousEpoch, v.By)
		v.Report.print(w)
		fmt.Fprintf(w, "%d committed, %d rolled back (%d aborts recorded) in %d scans", v.Committed, v.RolledBack, v.Aborted, v.Scans)
		if v.Released {
			fmt.Fprintf(w, "; nothing of the log is left in doubt after %s: released it\n", v.Resolved)
		} else {
			fmt.Fprintf(w, "; stopped with the log in doubt (%s): its lease was released, a live node or the next xactl recover --takeover goes on\n", v.Error)
		}
	})
	if err != nil {
		return err
	}
	if !v.Released {
		return errInDoubt
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "nobody (it was released)"
	}
	return s
}

// noStore is the Takeover's store when xactl takes one log over itself.
type noStore struct{}

func (noStore) Expired(context.Context) ([]recovery.ExpiredLease, error) { return nil, nil }
func (noStore) TakeOver(context.Context, xa.LogID, string) (recovery.TakenLog, error) {
	return nil, errors.New("cli: no store")
}

// doctorSQLLog checks a decision log in a database: reachable, the
// schema's version, the server's durability settings, the leases' health,
// the nodes' clocks.
func doctorSQLLog(ctx context.Context, c *config.Config, g *globals) ([]xa.Finding, *sqllog.Store, func()) {
	if c.Log.DSN == "" {
		return []xa.Finding{{Name: "location", Value: "log.dsn not set", Severity: xa.SeverityFail, Fix: "set log.dsn (XACTL_LOG_DSN) to the log database"}}, nil, func() {}
	}
	s, closeDB, err := sqlStore(c, g.logger())
	if err != nil {
		return []xa.Finding{{Name: "location", Value: err.Error(), Severity: xa.SeverityFail, Fix: "check log.kind and log.dsn"}}, nil, func() {}
	}
	db := s.DB()
	fs := []xa.Finding{}
	if err := db.PingContext(ctx); err != nil {
		closeDB()
		return append(fs, xa.Finding{Name: "connect", Value: err.Error(), Severity: xa.SeverityFail,
			Fix: "check log.dsn, that the log database runs and that this host may connect"}), nil, func() {}
	}
	fs = append(fs, xa.Finding{Name: "connect", Value: "ok (" + c.Log.Kind + ")", Severity: xa.SeverityOK})
	v, err := s.Version(ctx)
	switch {
	case errors.Is(err, sqllog.ErrNoLog):
		fs = append(fs, xa.Finding{Name: "schema", Value: err.Error(), Severity: xa.SeverityFail,
			Fix: fmt.Sprintf("create the log tables and this node's log: xactl log init --kind %s --dsn ...", c.Log.Kind)})
		closeDB()
		return fs, nil, func() {}
	case err != nil:
		fs = append(fs, xa.Finding{Name: "schema", Value: err.Error(), Severity: xa.SeverityFail, Fix: "check the user's privileges on the log tables"})
		closeDB()
		return fs, nil, func() {}
	case v != sqllog.SchemaVersion:
		fs = append(fs, xa.Finding{Name: "schema", Value: fmt.Sprintf("version %d", v), Severity: xa.SeverityFail,
			Fix: fmt.Sprintf("this xactl reads version %d: use the xactl of the version that made the tables", sqllog.SchemaVersion)})
		closeDB()
		return fs, nil, func() {}
	}
	fs = append(fs, xa.Finding{Name: "schema", Value: fmt.Sprintf("version %d", v), Severity: xa.SeverityOK})
	fs = append(fs, durabilityFindings(ctx, db, s.Dialect())...)
	logs, err := s.Logs(ctx)
	if err != nil {
		return append(fs, xa.Finding{Name: "leases", Value: err.Error(), Severity: xa.SeverityFail}), s, closeDB
	}
	for _, st := range logs {
		f := xa.Finding{Name: "lease of " + st.Identity.Node, Severity: xa.SeverityOK}
		switch st.State {
		case sqllog.StateHeld:
			f.Value = fmt.Sprintf("held by %s (%s, epoch %d), renewed %s ago, expires in %s", st.Holder, st.Kind, st.Epoch,
				age(st.RenewedAgo, true), age(st.ExpiresIn, true))
			if st.RenewedAgo > st.TTL/2 {
				f.Severity, f.Fix = xa.SeverityWarn, "renewed late (every third of the TTL is the rule): the holder is overloaded, paused or cut off from the log database; it is taken over if it expires"
			}
			if st.Kind != "own" {
				f.Fix = "a live node (or xactl) took this node's log over and is recovering its branches; it releases it when nothing is left in doubt"
			}
		case sqllog.StateExpired:
			f.Value = fmt.Sprintf("expired %s ago (%s, epoch %d)", age(-st.ExpiresIn, true), st.Holder, st.Epoch)
			f.Severity, f.Fix = xa.SeverityWarn, "its node is dead or cut off and no live node took its log over yet: are the live nodes running their takeover? xactl recover --takeover does it"
		default:
			f.Value = "free"
			if st.Clean {
				f.Value += " (released with nothing in doubt)"
			} else if st.Epoch > 0 {
				f.Value += " (its node stopped; a live node checks what it left)"
			}
		}
		fs = append(fs, f)
		if off := st.NodeOffset; off > time.Second || off < -time.Second {
			fs = append(fs, xa.Finding{Name: "clock of " + st.Identity.Node, Value: fmt.Sprintf("%v off the log database's", off.Round(time.Millisecond)),
				Severity: xa.SeverityWarn, Fix: "run NTP on the node: the log corrects for it (deadlines are on the database's clock), but its begin times in XIDs and its own recovery's ages are off"})
		}
	}
	return fs, s, closeDB
}

// durabilityFindings checks that the log database keeps a committed
// decision through a crash.
func durabilityFindings(ctx context.Context, db *sql.DB, d sqllog.Dialect) []xa.Finding {
	var fs []xa.Finding
	show := func(q string) (string, error) {
		var v string
		err := db.QueryRowContext(ctx, q).Scan(&v)
		return v, err
	}
	if d == sqllog.Postgres {
		if v, err := show(`SHOW fsync`); err == nil {
			f := xa.Finding{Name: "fsync", Value: v, Severity: xa.SeverityOK}
			if v != "on" {
				f.Severity, f.Fix = xa.SeverityFail, "fsync = off loses committed decisions in a crash of the machine: set fsync = on"
			}
			fs = append(fs, f)
		}
		if v, err := show(`SHOW synchronous_commit`); err == nil {
			f := xa.Finding{Name: "synchronous_commit", Value: v + " (the log forces on for its own writes)", Severity: xa.SeverityOK}
			fs = append(fs, f)
		}
		if v, err := show(`SHOW synchronous_standby_names`); err == nil {
			f := xa.Finding{Name: "synchronous standbys", Value: v, Severity: xa.SeverityOK}
			if v == "" {
				f.Value = "none"
				f.Severity, f.Fix = xa.SeverityWarn, "a decision lives on this server alone: losing its disk loses decisions; configure synchronous_standby_names (the log waits for them)"
			}
			fs = append(fs, f)
		}
		return fs
	}
	var name, v string
	if err := db.QueryRowContext(ctx, `SHOW VARIABLES LIKE 'innodb_flush_log_at_trx_commit'`).Scan(&name, &v); err == nil {
		f := xa.Finding{Name: "innodb_flush_log_at_trx_commit", Value: v, Severity: xa.SeverityOK}
		if v != "1" {
			f.Severity, f.Fix = xa.SeverityFail, "only 1 flushes the redo log at every commit: with "+v+" a crash of the server or machine loses committed decisions; set innodb_flush_log_at_trx_commit = 1"
		}
		fs = append(fs, f)
	}
	binlog := "OFF"
	if err := db.QueryRowContext(ctx, `SHOW VARIABLES LIKE 'log_bin'`).Scan(&name, &binlog); err == nil {
		if err := db.QueryRowContext(ctx, `SHOW VARIABLES LIKE 'sync_binlog'`).Scan(&name, &v); err == nil {
			f := xa.Finding{Name: "sync_binlog", Value: v + " (log_bin " + binlog + ")", Severity: xa.SeverityOK}
			if binlog == "ON" && v != "1" {
				f.Severity, f.Fix = xa.SeverityFail, "with a binary log, sync_binlog = 1 keeps a committed decision through a crash (and on the replicas); set it"
			}
			fs = append(fs, f)
		}
	}
	return fs
}
