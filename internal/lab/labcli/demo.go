package labcli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/cli"
	"github.com/xadb/xa/internal/lab/bank"
	"github.com/xadb/xa/internal/testrig/localdb"
	"github.com/xadb/xa/xa"
)

// The demo coordinator's phase-2 settings: short, so that the grace period
// of its decision log, which must cover them, is short too.
const (
	demoPhase2Attempts = 2
	demoPhase2Timeout  = time.Second
	demoNode           = "demo"
)

type demoOpts struct {
	mysqlDSN, pgDSN string
	accounts        int
	workers         int
	crashAfter      int
	txTimeout       time.Duration
	noSink          bool
	sinkRecords     int
	sinkCrashAt     int
}

func newDemo(g *globals) *cobra.Command {
	var o demoOpts
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show a cross-database atomic commit surviving a coordinator crash, and the exactly-once sink surviving its own",
		Long: `The demo:

 1. starts throw-away MariaDB and PostgreSQL servers on loopback (or uses
    --mysql-dsn/--postgres-dsn, or XA_MYSQL_DSN/XA_POSTGRES_DSN: it then
    recreates tables accounts and ledger in those databases);
 2. creates accounts in both databases;
 3. writes an xactl configuration for them, creates the decision log with
    'xactl log init', and runs concurrent transfers between them in a
    coordinator process, each debiting one database and crediting the other
    in one global transaction;
 4. kills that process with SIGKILL right after a commit decision became
    durable and before any branch was told, so branches are left in doubt;
    'xactl list' shows them;
 5. runs 'xactl recover' until it exits 0 and the decision log keeps no
    commit record: it commits what was decided and rolls back the rest once
    the grace period is over;
 6. checks with direct SQL that the total balance is unchanged, that every
    transfer reported committed is in both databases and none in only one,
    and that nothing is left prepared.

Then the exactly-once sink (unless --no-sink):

 7. starts a Kafka cluster in this process (kfake), produces records into
    a topic, and runs the sink in a process of its own (xalab
    sink-worker), writing every record to a table in both databases, a
    checkpoint (one global transaction) at a time;
 8. kills that process with SIGKILL right before a checkpoint's
    PostgreSQL branch is committed (its decision is durable, its MariaDB
    branch committed), and shows the sink's prepared branches, with what
    restore will do with each, and its progress;
 9. starts the sink again: its restore commits the decided branch and
    rolls back the undecided ones, and it reads on from the committed
    positions until it has caught up with Kafka;
10. checks with direct SQL that every record is in both databases exactly
    once (the tables have no unique key that would hide a duplicate),
    that the progress rows equal Kafka's end offsets, and that nothing is
    left prepared.

xactl runs in this process (the operator's tool, as it is shipped), with
the configuration file the demo wrote.

Exit code 0 when every check passes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.mysqlDSN, o.pgDSN, err = g.dsns(o.mysqlDSN, o.pgDSN); err != nil {
				return err
			}
			if o.accounts < 2 || o.workers < 1 || o.crashAfter < 1 {
				return usageErr("--accounts >= 2, --workers >= 1, --crash-after >= 1")
			}
			if o.txTimeout <= 0 {
				return usageErr("--tx-timeout must be positive")
			}
			if o.sinkCrashAt < 1 || o.sinkRecords < demoCheckpointRecords*(o.sinkCrashAt+2) {
				return usageErr("--sink-crash-at >= 1, --sink-records >= %d x (--sink-crash-at + 2)", demoCheckpointRecords)
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
	f.BoolVar(&o.noSink, "no-sink", false, "show the transfers only, not the exactly-once sink")
	f.IntVar(&o.sinkRecords, "sink-records", 20000, "records streamed through the sink")
	f.IntVar(&o.sinkCrashAt, "sink-crash-at", 4, "kill the sink right before this checkpoint's PostgreSQL branch is committed")
	return cmd
}

// stepper prints numbered steps and a live status line.
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
	s.clear()
	fmt.Fprintf(s.w, "      %s\n", fmt.Sprintf(format, args...))
}

func (s *stepper) status(format string, args ...any) {
	if s.tty {
		fmt.Fprintf(s.w, "\r      %s\x1b[K", fmt.Sprintf(format, args...))
	}
}

// clear removes the status line.
func (s *stepper) clear() {
	if s.tty {
		fmt.Fprint(s.w, "\r\x1b[K")
	}
}

func (s *stepper) ok(format string, args ...any) {
	s.clear()
	fmt.Fprintf(s.w, "      ok: %s (%s)\n", fmt.Sprintf(format, args...), time.Since(s.t0).Round(10*time.Millisecond))
}

// show prints what a command printed, indented under the step.
func (s *stepper) show(r run) {
	s.clear()
	fmt.Fprintf(s.w, "      $ %s\n", r.line)
	for _, text := range []string{r.stdout, r.stderr} {
		for _, l := range strings.SplitAfter(text, "\n") {
			if l == "" {
				continue
			}
			if !strings.HasSuffix(l, "\n") {
				l += "\n"
			}
			if l != "\n" {
				l = "      " + l
			}
			io.WriteString(s.w, l) //nolint:errcheck
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// xactl runs the operator's tool in process (cli.MainContext) with the
// demo's configuration file. The node, the log directory and the output
// format are given as flags too, so that XACTL_* variables of the caller's
// environment cannot point it elsewhere.
type xactl struct {
	config, logDir string
}

// run is one xactl command and what it did.
type run struct {
	line           string // as a person would type it
	code           int
	stdout, stderr string
}

func (r run) String() string {
	return fmt.Sprintf("%s: exit %d\n%s%s", r.line, r.code, r.stdout, r.stderr)
}

func (x xactl) run(ctx context.Context, output string, args ...string) run {
	line := "xactl " + strings.Join(args, " ")
	if output != "table" {
		line = "xactl -o " + output + " " + strings.Join(args, " ")
	}
	all := append([]string{"--config", x.config, "--node", demoNode, "--log-dir", x.logDir, "-o", output}, args...)
	var stdout, stderr bytes.Buffer
	code := cli.MainContext(ctx, all, &stdout, &stderr)
	return run{line: line, code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// json runs an xactl command with --output json and decodes its result
// into v.
func (x xactl) json(ctx context.Context, v any, okCodes []int, args ...string) error {
	r := x.run(ctx, "json", args...)
	if !intsContain(okCodes, r.code) {
		return fmt.Errorf("%s", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	return nil
}

func intsContain(s []int, n int) bool {
	for _, m := range s {
		if m == n {
			return true
		}
	}
	return false
}

// writeConfig writes xactl.yaml in dir for the demo's two databases and
// decision log.
func writeConfig(dir, logDir, mysqlDSN, pgDSN string) (string, error) {
	// JSON strings are YAML double-quoted scalars. xactl expands $VAR in a
	// DSN: one with a $ of its own goes through a variable.
	dsn := func(name, v string) string {
		if strings.Contains(v, "$") {
			os.Setenv(name, v) //nolint:errcheck
			return "${" + name + "}"
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	logJSON, _ := json.Marshal(logDir)
	text := fmt.Sprintf(`# xactl's configuration for xalab demo
node: %s
log:
  kind: file
  dir: %s
participants:
  - name: %s
    driver: mysql
    dsn: %s
  - name: %s
    driver: postgres
    dsn: %s
`, demoNode, logJSON, bank.MySQLName, dsn("XALAB_DEMO_MYSQL_DSN", mysqlDSN), bank.PostgresName, dsn("XALAB_DEMO_POSTGRES_DSN", pgDSN))
	path := filepath.Join(dir, "xactl.yaml")
	return path, os.WriteFile(path, []byte(text), 0o600)
}

// listJSON is what the demo reads of 'xactl list -o json'.
type listJSON struct {
	Grace    string `json:"grace"`
	Branches []struct {
		Decision string `json:"decision"`
	} `json:"branches"`
	InDoubt int `json:"in_doubt"`
}

// dumpJSON is what the demo reads of 'xactl log dump --live -o json'.
type dumpJSON struct {
	Records []struct {
		Type string `json:"type"`
	} `json:"records"`
}

func runDemo(ctx context.Context, g *globals, o demoOpts) error {
	s := &stepper{w: g.stdout, of: 6, tty: isTerminal(g.stdout)}
	if !o.noSink {
		s.of += sinkSteps
		fmt.Fprintln(g.stdout, "xa demo: atomic transfers between MariaDB and PostgreSQL, a coordinator killed mid-commit, and recovery;\nthen a Kafka stream into both through the exactly-once sink, the sink killed mid-commit, and its restore")
	} else {
		fmt.Fprintln(g.stdout, "xa demo: atomic transfers between MariaDB and PostgreSQL, a coordinator killed mid-commit, and recovery")
	}

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

	// 3. The decision log, made by xactl as an operator makes it, then
	// transfers in a coordinator process that will be killed. The grace
	// covers the coordinator's timeout and its (short) phase-2 retry
	// budget.
	logDir := filepath.Join(work, "decisions")
	cfgPath, err := writeConfig(work, logDir, o.mysqlDSN, o.pgDSN)
	if err != nil {
		return err
	}
	x := xactl{config: cfgPath, logDir: logDir}
	grace := o.txTimeout + xa.Phase2Budget(demoPhase2Attempts, demoPhase2Timeout, xa.DefaultRetryBackoff) + time.Second
	s.step("running transfers in a coordinator process (%d at a time)", o.workers)
	s.say("xactl's configuration: %s (node %s, the decision log in %s, participants %s and %s)", cfgPath, demoNode, logDir, bank.MySQLName, bank.PostgresName)
	r := x.run(ctx, "table", "log", "init", "--timeout", o.txTimeout.String(), "--grace", grace.String())
	s.show(r)
	if r.code != cli.ExitOK {
		return fmt.Errorf("creating the decision log: %s", r)
	}
	s.say("the grace is the timeout plus the coordinator's phase-2 retries, %d x %s (smaller than the defaults, as the warning asks), and a second", demoPhase2Attempts, demoPhase2Timeout)
	r = x.run(ctx, "table", "participant", "init")
	s.show(r)
	if r.code != cli.ExitOK {
		return fmt.Errorf("setting the participants up: %s", r)
	}
	s.say("each participant carries an identity now: the coordinator records it in the log before it prepares a branch there, " +
		"and recovery acts on a participant only while the database that answers has that identity")
	s.say("each transfer debits one database and credits the other, and writes a ledger row in both, in one global transaction")
	committed, summary, err := runWorker(ctx, s, o, logDir)
	if err != nil {
		return err
	}
	s.say("%s", summary)

	// 4. What the crash left, as xactl shows it.
	s.step("in-doubt branches left by the crash")
	r = x.run(ctx, "table", "list")
	s.show(r)
	if r.code != cli.ExitInDoubt {
		return fmt.Errorf("xactl list should have found in-doubt branches (exit %d), got exit %d", cli.ExitInDoubt, r.code)
	}
	var listed listJSON
	if err := x.json(ctx, &listed, []int{cli.ExitInDoubt}, "list"); err != nil {
		return err
	}
	logged := 0
	for _, b := range listed.Branches {
		if b.Decision == "commit" {
			logged++
		}
	}
	s.say("%d prepared branch(es), %d of them with a durable commit decision; they hold row locks until resolved", len(listed.Branches), logged)
	if logged == 0 {
		return errors.New("the crash left no branch with a logged commit: the demo did not show what it should")
	}
	grace, err = time.ParseDuration(listed.Grace)
	if err != nil {
		return fmt.Errorf("xactl list: grace %q: %w", listed.Grace, err)
	}

	// 5. Recovery: xactl recover until it exits 0 and no commit record is
	// left. A round that changed nothing (branches waiting for the grace
	// period) is not shown.
	s.step("recovering with xactl recover (grace period %s for branches without a decision: the log's)", grace)
	deadline := time.Now().Add(grace + 30*time.Second)
	for round := 1; ; round++ {
		r := x.run(ctx, "table", "recover")
		if err := ctx.Err(); err != nil {
			return err
		}
		if r.code == cli.ExitUsage {
			return fmt.Errorf("%s", r)
		}
		var live dumpJSON
		if err := x.json(ctx, &live, []int{cli.ExitOK}, "log", "dump", "--live"); err != nil {
			return err
		}
		records := 0
		for _, e := range live.Records {
			if e.Type == "commit" {
				records++
			}
		}
		done := r.code == cli.ExitOK && records == 0
		if round == 1 || done || r.code == cli.ExitError || changed(r.stdout) {
			r.line += fmt.Sprintf("    (round %d, exit %d)", round, r.code)
			s.show(r)
		}
		if done {
			s.ok("every in-doubt branch resolved, every decision record forgotten, in %d round(s) of xactl recover", round)
			break
		}
		why := ""
		if r.code == cli.ExitInDoubt {
			why = "; branches without a decision wait for the grace period"
		}
		s.status("round %d: xactl recover exited %d, %d commit record(s) left%s", round, r.code, records, why)
		if time.Now().After(deadline) {
			s.clear()
			return fmt.Errorf("recovery did not finish within the grace period and 30s: %d commit record(s) left; the last round:\n%s", records, r)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}

	// 6. Invariants, by direct SQL.
	s.step("checking the invariants with direct SQL")
	st, err := bank.Read(ctx, o.mysqlDSN, o.pgDSN, demoNode)
	if err != nil {
		return err
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
	if o.noSink {
		fmt.Fprintln(g.stdout, "\nAll invariants hold: the crash lost nothing and committed nothing by halves.")
		return nil
	}
	s.ok("the transfers' invariants hold: the coordinator's crash lost nothing and committed nothing by halves")
	if err := runSinkDemo(ctx, s, o, x, cfgPath); err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, "\nAll invariants hold: the coordinator's crash lost nothing and committed nothing by halves, and through the\n"+
		"sink's crash every record landed in both databases exactly once.")
	return nil
}

// changed tells whether xactl recover's table output reports something
// done: a branch resolved (RESULT done), an abort recorded, a record
// forgotten.
func changed(stdout string) bool {
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasSuffix(l, " done") || strings.HasPrefix(l, "recorded the abort") || strings.HasPrefix(l, "forgot ") {
			return true
		}
	}
	return false
}

// runWorker runs the coordinator process (xalab bank-worker) until it is
// killed at the crash point, and returns the global ids it reported
// committed.
func runWorker(ctx context.Context, s *stepper, o demoOpts, logDir string) ([]string, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.CommandContext(ctx, self, "bank-worker",
		"--mysql-dsn", o.mysqlDSN, "--postgres-dsn", o.pgDSN, "--decision-log", logDir, "--worker-node", demoNode,
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
	s.clear()
	return committed, summary, nil
}

func redact(dsn string) string {
	if i := strings.Index(dsn, "@"); i > 0 {
		if j := strings.LastIndex(dsn[:i], ":"); j > 0 && !strings.Contains(dsn[:j], "@") {
			return dsn[:j+1] + "***" + dsn[i:]
		}
	}
	return dsn
}
