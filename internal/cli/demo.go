package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/bank"
	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/internal/localdb"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// The demo coordinator's phase-2 settings: short, so that the grace period
// of its decision log, which must cover them, is short too.
const (
	demoPhase2Attempts = 2
	demoPhase2Timeout  = time.Second
)

type demoOpts struct {
	mysqlDSN, pgDSN string
	accounts        int
	workers         int
	crashAfter      int
	txTimeout       time.Duration
}

func newDemo(g *globals) *cobra.Command {
	var o demoOpts
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show a cross-database atomic commit surviving a coordinator crash",
		Long: `The demo:

 1. starts throw-away MariaDB and PostgreSQL servers on loopback (or uses
    --mysql-dsn/--postgres-dsn, or XA_MYSQL_DSN/XA_POSTGRES_DSN: it then
    recreates tables accounts and ledger in those databases);
 2. creates accounts in both databases;
 3. runs concurrent transfers between them in a coordinator process, each
    debiting one database and crediting the other in one global transaction;
 4. kills that process with SIGKILL right after a commit decision became
    durable and before any branch was told, so branches are left in doubt;
 5. lists the in-doubt branches and recovers them from the decision log;
 6. checks with direct SQL that the total balance is unchanged, that every
    transfer reported committed is in both databases and none in only one,
    and that nothing is left prepared.

Exit code 0 when every check passes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.mysqlDSN == "" {
				o.mysqlDSN = g.getenv("XA_MYSQL_DSN")
			}
			if o.pgDSN == "" {
				o.pgDSN = g.getenv("XA_POSTGRES_DSN")
			}
			if (o.mysqlDSN == "") != (o.pgDSN == "") {
				return usageErr("give both --mysql-dsn and --postgres-dsn, or neither")
			}
			if o.accounts < 2 || o.workers < 1 || o.crashAfter < 1 {
				return usageErr("--accounts >= 2, --workers >= 1, --crash-after >= 1")
			}
			return runDemo(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.mysqlDSN, "mysql-dsn", "", "use this MySQL/MariaDB database instead of a throw-away server")
	f.StringVar(&o.pgDSN, "postgres-dsn", "", "use this PostgreSQL database instead of a throw-away server")
	f.IntVar(&o.accounts, "accounts", 20, "accounts in each database")
	f.IntVar(&o.workers, "workers", 8, "concurrent transfers")
	f.IntVar(&o.crashAfter, "crash-after", 150, "kill the coordinator right after this many commit decisions are durable")
	f.DurationVar(&o.txTimeout, "tx-timeout", 3*time.Second, "global transaction timeout of the coordinator")
	return cmd
}

// step prints numbered steps and a live status line.
type stepper struct {
	w     io.Writer
	n, of int
	tty   bool
	t0    time.Time
}

func (s *stepper) step(format string, args ...any) {
	s.n++
	s.t0 = time.Now()
	fmt.Fprintf(s.w, "\n[%d/%d] %s\n", s.n, s.of, fmt.Sprintf(format, args...))
}

func (s *stepper) say(format string, args ...any) {
	fmt.Fprintf(s.w, "      %s\n", fmt.Sprintf(format, args...))
}

func (s *stepper) status(format string, args ...any) {
	if s.tty {
		fmt.Fprintf(s.w, "\r      %s\x1b[K", fmt.Sprintf(format, args...))
	}
}

func (s *stepper) ok(format string, args ...any) {
	if s.tty {
		fmt.Fprint(s.w, "\r\x1b[K")
	}
	fmt.Fprintf(s.w, "      ok: %s (%s)\n", fmt.Sprintf(format, args...), time.Since(s.t0).Round(10*time.Millisecond))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func runDemo(ctx context.Context, g *globals, o demoOpts) error {
	s := &stepper{w: g.stdout, of: 6, tty: isTerminal(g.stdout)}
	fmt.Fprintln(g.stdout, "xa demo: atomic transfers between MariaDB and PostgreSQL, a coordinator killed mid-commit, and recovery")

	work, err := os.MkdirTemp("", "xa-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	// 1. Servers.
	if o.mysqlDSN == "" {
		s.step("starting throw-away MariaDB and PostgreSQL servers on loopback")
		defer localdb.Cleanup()
		my, pg, err := startServers(ctx, "bank")
		if err != nil {
			return fmt.Errorf("starting servers: %w\n(on Debian: apt-get install -y mariadb-server postgresql, or run ./scripts/demo which does it)", err)
		}
		o.mysqlDSN, o.pgDSN = my.DSN("bank"), pg.DSN("bank")
		s.ok("MariaDB on 127.0.0.1:%d, PostgreSQL on 127.0.0.1:%d", my.Port, pg.Port)
	} else {
		s.step("using the given databases")
		s.ok("%s and %s", redact(o.mysqlDSN), redact(o.pgDSN))
	}

	// 2. Accounts.
	s.step("creating %d accounts of %d in each database", o.accounts, bank.Initial)
	if err := bank.Setup(ctx, o.mysqlDSN, o.pgDSN, o.accounts); err != nil {
		return err
	}
	want := int64(2 * o.accounts * bank.Initial)
	s.ok("total balance over both databases: %d", want)

	// 3. Transfers in a coordinator process that will be killed. Its
	// decision log is created first: the grace covers the coordinator's
	// timeout and its (short) phase-2 retry budget.
	logDir := filepath.Join(work, "decisions")
	grace := o.txTimeout + xa.Phase2Budget(demoPhase2Attempts, demoPhase2Timeout, xa.DefaultRetryBackoff) + time.Second
	ident, err := xa.NewLogIdentity("demo", o.txTimeout, grace, time.Now())
	if err != nil {
		return err
	}
	created, err := filelog.Create(logDir, ident, filelog.Options{Logger: g.logger()})
	if err != nil {
		return fmt.Errorf("creating the decision log: %w", err)
	}
	if err := created.Close(); err != nil {
		return err
	}
	s.step("running transfers in a coordinator process (%d at a time)", o.workers)
	s.say("decision log %s created for node demo: timeout %s, grace %s (the timeout plus phase-2 retries of %d x %s, and a second)",
		ident.ID, ident.Timeout, ident.Grace, demoPhase2Attempts, demoPhase2Timeout)
	s.say("each transfer debits one database and credits the other, and writes a ledger row in both, in one global transaction")
	committed, summary, err := runWorker(ctx, s, o, logDir)
	if err != nil {
		return err
	}
	s.say("%s", summary)

	// 4. What the crash left.
	s.step("in-doubt branches left by the crash (as 'xactl list' shows them)")
	cfg := &config.Config{Log: config.Log{Dir: logDir},
		Participants: []config.Participant{
			{Name: bank.MySQLName, Driver: "mysql", DSN: o.mysqlDSN},
			{Name: bank.PostgresName, Driver: "postgres", DSN: o.pgDSN},
		}}
	cfg.Defaults()
	ps := openParticipants(ctx, cfg, g.logger())
	defer ps.Close()
	if errs := ps.openErrors(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	decisions, err := openDecisionLog(cfg, forWriting, g.logger())
	if err != nil {
		return fmt.Errorf("reopening the decision log: %w", err)
	}
	defer decisions.Close()
	sc, err := newScanner(cfg, ps, decisions, g.logger())
	if err != nil {
		return err
	}
	plan, err := sc.Plan(ctx)
	if err != nil {
		return err
	}
	views := []branchView{}
	logged := 0
	for _, b := range plan.Branches {
		views = append(views, viewBranch(b, sc.Grace(), nil))
		if b.Logged {
			logged++
		}
	}
	printIndented(g.stdout, views, plan.Participants, false)
	s.say("%d prepared branch(es), %d of them with a durable commit decision; they hold row locks until resolved", len(plan.Branches), logged)
	if logged == 0 {
		return errors.New("the crash left no branch with a logged commit: the demo did not show what it should")
	}

	// 5. Recovery.
	s.step("recovering from the decision log (grace period %s for branches without a decision: the log's)", sc.Grace())
	deadline := time.Now().Add(sc.Grace() + 30*time.Second)
	var actions []branchView
	for round := 1; ; round++ {
		rep, err := sc.Scan(ctx)
		if err != nil {
			return err
		}
		for _, b := range rep.Branches {
			if b.Done {
				actions = append(actions, viewBranch(b, 0, nil))
			}
		}
		left := rep.InDoubt()
		recs, _ := decisions.Commits(ctx)
		s.status("round %d: %d resolved so far, %d in doubt, %d decision record(s) left", round, len(actions), left, len(recs))
		if left == 0 && len(recs) == 0 && len(rep.Errors) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("recovery did not finish: %d in doubt, %d records, errors %v", left, len(recs), rep.Errors)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	s.ok("every in-doubt branch resolved, every decision record forgotten")
	printIndented(g.stdout, actions, plan.Participants, true)

	// 6. Invariants, by direct SQL.
	s.step("checking the invariants with direct SQL")
	st, err := bank.Read(ctx, o.mysqlDSN, o.pgDSN, "demo")
	if err != nil {
		return err
	}
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAILED"
	}
	s.say("total balance: %d + %d = %d, before %d: %s", st.MySQLTotal, st.PGTotal, st.Total(), want, mark(st.Total() == want))
	both, one := 0, 0
	for id := range st.MySQLLedger {
		if _, ok := st.PGLedger[id]; ok {
			both++
		} else {
			one++
		}
	}
	for id := range st.PGLedger {
		if _, ok := st.MySQLLedger[id]; !ok {
			one++
		}
	}
	missing := 0
	for _, id := range committed {
		_, a := st.MySQLLedger[id]
		_, b := st.PGLedger[id]
		if !a || !b {
			missing++
		}
	}
	s.say("transfers in both databases: %d; in only one: %d: %s", both, one, mark(one == 0))
	s.say("transfers the coordinator reported committed: %d, missing: %d: %s", len(committed), missing, mark(missing == 0))
	s.say("prepared branches left: %d in MariaDB, %d in PostgreSQL: %s", len(st.MySQLPrepared), len(st.PGPrepared), mark(len(st.MySQLPrepared)+len(st.PGPrepared) == 0))
	if err := st.Check(o.accounts, committed); err != nil {
		return &exitError{code: ExitError, err: err}
	}
	fmt.Fprintln(g.stdout, "\nAll invariants hold: the crash lost nothing and committed nothing by halves.")
	return nil
}

// runWorker runs the coordinator process until it is killed at the crash
// point, and returns the global ids it reported committed.
func runWorker(ctx context.Context, s *stepper, o demoOpts, logDir string) ([]string, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.CommandContext(ctx, self, "bank-worker",
		"--mysql-dsn", o.mysqlDSN, "--postgres-dsn", o.pgDSN, "--decision-log", logDir,
		"--accounts", fmt.Sprint(o.accounts), "--workers", fmt.Sprint(o.workers),
		"--crash", fmt.Sprintf("log:%d", o.crashAfter), "--tx-timeout", o.txTimeout.String(),
		"--phase2-attempts", fmt.Sprint(demoPhase2Attempts), "--phase2-timeout", demoPhase2Timeout.String(),
		"--seed", fmt.Sprint(time.Now().UnixNano()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	s.say("coordinator process %d started; it will be killed with SIGKILL right after commit decision #%d is durable, before any branch hears of it", cmd.Process.Pid, o.crashAfter)
	var committed []string
	counts := map[string]int{}
	sc := bufio.NewScanner(out)
	last := time.Time{}
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		id, _, _ := strings.Cut(rest, " ")
		counts[kind]++
		if kind == "committed" || kind == "pending" {
			committed = append(committed, id)
		}
		if time.Since(last) > 100*time.Millisecond {
			s.status("committed %d, aborted %d, unknown %d", counts["committed"]+counts["pending"], counts["aborted"], counts["unknown"])
			last = time.Now()
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return nil, "", fmt.Errorf("the coordinator process should have died of SIGKILL at its crash point, got %v\n%s", err, stderr.String())
	}
	summary := fmt.Sprintf("the coordinator died of SIGKILL after reporting %d transfers committed, %d aborted (conflicts, timeouts), %d with outcome unknown",
		counts["committed"]+counts["pending"], counts["aborted"], counts["unknown"])
	if s.tty {
		fmt.Fprint(s.w, "\r\x1b[K")
	}
	return committed, summary, nil
}

// startServers starts throw-away MariaDB and PostgreSQL servers side by
// side, each with an empty database called name.
func startServers(ctx context.Context, name string) (my, pg *localdb.Server, err error) {
	var e1, e2 error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); my, e1 = localdb.Start(ctx, localdb.MySQL, nil) }()
	pg, e2 = localdb.Start(ctx, localdb.Postgres, nil)
	wg.Wait()
	if err := errors.Join(e1, e2); err != nil {
		return nil, nil, err
	}
	if err := errors.Join(my.Exec(ctx, "", "CREATE DATABASE "+name), pg.Exec(ctx, "", "CREATE DATABASE "+name)); err != nil {
		return nil, nil, err
	}
	return my, pg, nil
}

func redact(dsn string) string {
	if i := strings.Index(dsn, "@"); i > 0 {
		if j := strings.LastIndex(dsn[:i], ":"); j > 0 && !strings.Contains(dsn[:j], "@") {
			return dsn[:j+1] + "***" + dsn[i:]
		}
	}
	return dsn
}

// printIndented prints the branch table indented under a step.
func printIndented(w io.Writer, views []branchView, listed []string, withResult bool) {
	var b strings.Builder
	printBranches(&b, views, listed, nil, withResult)
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		if l != "" {
			io.WriteString(w, "      "+l) //nolint:errcheck
		}
	}
}
