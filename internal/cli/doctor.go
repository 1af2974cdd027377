package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

type findingView struct {
	Check    string `json:"check"`
	Value    string `json:"value"`
	Severity string `json:"severity"`
	Fix      string `json:"fix,omitempty"`
}

func newDoctor(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check every participant and the decision log, and say how to fix what is wrong",
		Long: `For each participant: can it be reached, its version, its XA / prepared-transaction
settings, the privileges recovery needs, its clock against this machine's,
and the oldest prepared branch (ours and other applications'), each with the
fix when something is wrong. Then the decision log: readable, intact, in use.

Exit code 1 when a check fails (a warning does not fail).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			c, err := g.loadConfig(false)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			results := map[string][]findingView{}
			var order []string
			failed := false
			add := func(who string, f xa.Finding) {
				if _, ok := results[who]; !ok {
					order = append(order, who)
				}
				results[who] = append(results[who], findingView{Check: f.Name, Value: f.Value, Severity: f.Severity.String(), Fix: f.Fix})
				failed = failed || f.Severity == xa.SeverityFail
			}
			for _, pc := range c.Participants {
				who := "participant " + pc.Name
				for _, f := range doctorParticipant(ctx, c, pc, g) {
					add(who, f)
				}
			}
			for _, f := range doctorLog(c) {
				add("decision log", f)
			}
			if asJSON {
				out := []map[string]any{}
				for _, who := range order {
					out = append(out, map[string]any{"subject": who, "findings": results[who]})
				}
				if err := writeJSON(g.stdout, map[string]any{"results": out, "ok": !failed}); err != nil {
					return err
				}
			} else {
				for i, who := range order {
					if i > 0 {
						fmt.Fprintln(g.stdout)
					}
					fmt.Fprintln(g.stdout, who)
					tw := table(g.stdout)
					fmt.Fprintln(tw, "  CHECK\tVALUE\tSTATUS\tFIX")
					for _, f := range results[who] {
						fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Check, f.Value, f.Severity, f.Fix)
					}
					tw.Flush()
				}
			}
			if failed {
				return &exitError{code: ExitError, err: errors.New("some checks failed: see FIX")}
			}
			return nil
		},
	}
}

func doctorParticipant(ctx context.Context, c *config.Config, pc config.Participant, g *globals) []xa.Finding {
	fail := func(name, value, fix string) []xa.Finding {
		return []xa.Finding{{Name: name, Value: value, Severity: xa.SeverityFail, Fix: fix}}
	}
	p, err := openParticipant(ctx, pc, g.logger())
	if err != nil {
		return fail("connect", err.Error(), "check the DSN, that the server runs and that this host may connect")
	}
	defer p.close()
	fs, _ := p.checker.Check(ctx) // the findings say what failed
	if f, ok := clockFinding(ctx, pc); ok {
		fs = append(fs, f)
	}
	list, err := p.rm.Recover(ctx)
	if err != nil {
		return append(fs, xa.Finding{Name: "prepared branches", Value: err.Error(), Severity: xa.SeverityFail, Fix: "recovery needs to list prepared branches: see the privilege findings"})
	}
	now := time.Now()
	var oursN, foreignN int
	var oursOldest, foreignOldest time.Duration
	foreignUnknownAge := false
	for _, b := range list {
		a, known := b.Age(now)
		if _, _, ok := xa.Owned(b.XID); ok {
			oursN++
			oursOldest = max(oursOldest, a)
			continue
		}
		foreignN++
		if known {
			foreignOldest = max(foreignOldest, a)
		} else {
			foreignUnknownAge = true
		}
	}
	grace := time.Duration(c.Recovery.Grace)
	f := xa.Finding{Name: "prepared branches (ours)", Value: fmt.Sprintf("%d, oldest %s", oursN, age(oursOldest, oursN > 0)), Severity: xa.SeverityOK}
	if oursN > 0 && oursOldest > grace {
		f.Severity, f.Fix = xa.SeverityWarn, "in doubt beyond the grace period, holding locks: run xactl recover (is a transaction manager's recovery running?)"
	}
	fs = append(fs, f)
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

// clockFinding compares the server's clock with this machine's: ages of
// prepared branches and the grace period rely on them agreeing.
func clockFinding(ctx context.Context, pc config.Participant) (xa.Finding, bool) {
	var server time.Time
	t0 := time.Now()
	switch pc.Driver {
	case "mysql":
		mc, err := gomysql.ParseDSN(pc.DSN)
		if err != nil {
			return xa.Finding{}, false
		}
		mc.ParseTime = true
		db, err := sql.Open("mysql", mc.FormatDSN())
		if err != nil {
			return xa.Finding{}, false
		}
		defer db.Close()
		var us int64
		if err := db.QueryRowContext(ctx, "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)").Scan(&us); err != nil {
			return xa.Finding{}, false
		}
		server = time.UnixMicro(us)
	case "postgres":
		conn, err := pgx.Connect(ctx, pc.DSN)
		if err != nil {
			return xa.Finding{}, false
		}
		defer conn.Close(ctx)
		if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&server); err != nil {
			return xa.Finding{}, false
		}
	default:
		return xa.Finding{}, false
	}
	rtt := time.Since(t0)
	skew := server.Sub(t0.Add(rtt / 2))
	f := xa.Finding{Name: "clock skew", Value: skew.Round(time.Millisecond).String(), Severity: xa.SeverityOK}
	if skew > 5*time.Second || skew < -5*time.Second {
		f.Severity, f.Fix = xa.SeverityWarn, "synchronise clocks (NTP): branch ages and the presumed-abort grace period assume they agree"
	}
	return f, true
}

func doctorLog(c *config.Config) []xa.Finding {
	if c.Log.Dir == "" {
		return []xa.Finding{{Name: "location", Value: "not set", Severity: xa.SeverityWarn, Fix: "set log.dir (XACTL_LOG_DIR, --log-dir) to check the decision log"}}
	}
	st, err := os.Stat(c.Log.Dir)
	if err != nil {
		return []xa.Finding{{Name: "location", Value: err.Error(), Severity: xa.SeverityFail, Fix: "the decision log directory must exist on a local, durable disk"}}
	}
	fs := []xa.Finding{{Name: "location", Value: c.Log.Dir, Severity: xa.SeverityOK}}
	if !st.IsDir() {
		return []xa.Finding{{Name: "location", Value: c.Log.Dir + " is not a directory", Severity: xa.SeverityFail, Fix: "point log.dir at a directory"}}
	}
	rep, err := filelog.Verify(c.Log.Dir)
	switch {
	case errors.Is(err, filelog.ErrCorrupt):
		fs = append(fs, xa.Finding{Name: "integrity", Value: err.Error(), Severity: xa.SeverityFail, Fix: "the log is corrupt: keep a copy and inspect it with xactl log verify / log dump; never delete records by hand"})
	case err != nil:
		fs = append(fs, xa.Finding{Name: "integrity", Value: err.Error(), Severity: xa.SeverityFail, Fix: "the log cannot be read: check permissions"})
	case len(rep.Segments) == 0:
		fs = append(fs, xa.Finding{Name: "integrity", Value: "no decision log here (no segment files)", Severity: xa.SeverityWarn,
			Fix: "point log.dir at the transaction manager's decision log directory (the transaction manager creates the log when it first starts); the other commands refuse a directory without a log"})
	default:
		v := fmt.Sprintf("%d segment(s), %d live commit record(s), %d heuristic outcome(s)", len(rep.Segments), rep.LiveCommits, rep.LiveHeuristics)
		f := xa.Finding{Name: "integrity", Value: v, Severity: xa.SeverityOK}
		if rep.LiveHeuristics > 0 {
			f.Severity, f.Fix = xa.SeverityWarn, "manual resolutions are on record: review them with xactl log dump --live"
		}
		fs = append(fs, f)
		u := xa.Finding{Name: "in use", Value: "no", Severity: xa.SeverityOK}
		if rep.InUse {
			u.Value = "yes: a transaction manager has it open"
		}
		fs = append(fs, u)
	}
	return fs
}
