// Package cli is xactl, the operator's command-line tool: it inspects and
// resolves in-doubt transactions, checks participants, creates, reads and
// checks the decision log, and sets up, runs and inspects the exactly-once
// sinks (sink*.go). cmd/xactl only calls Main.
//
// It is product code: it imports no lab code (internal/lab: the demo, the
// benchmark, crash injection, Pebble) and no test rig (internal/layout
// enforces both). The lab runs xactl in process through MainContext.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/config"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitError   = 1
	ExitUsage   = 2
	ExitInDoubt = 3 // the command worked, and in-doubt branches remain
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// errInDoubt is returned by commands that succeeded but leave in-doubt
// branches: exit code 3, no error message.
var errInDoubt = &exitError{code: ExitInDoubt}

func usageErr(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// minOpTimeout is the shortest --op-timeout: less leaves no time to reach
// a database.
const minOpTimeout = time.Second

// globals are the persistent flags.
type globals struct {
	configPath string
	node       string
	logDir     string
	// logKind and logDSN override log.kind and log.dsn (xactl log init
	// --kind --dsn).
	logKind, logDSN string
	output          string
	verbose         bool
	timeout         time.Duration

	// out prints results, as a table or as JSON (--output), for every
	// command; set before any command runs.
	out *printer

	stdout, stderr io.Writer
	getenv         func(string) string
}

// Main runs xactl with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return MainContext(ctx, args, stdout, stderr)
}

// MainContext is Main with a given context and no signal handling of its
// own: ending ctx stops the command as SIGINT does. Tests run recover
// --watch with it, and xalab demo runs xactl in process with it.
func MainContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "xactl:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "xactl:", err)
	if isUsage(err) {
		return ExitUsage
	}
	return ExitError
}

// isUsage tells the usage errors cobra returns untyped: an unknown
// subcommand, a missing required flag. Flag and argument errors are typed
// where they arise (see SetFlagErrorFunc and usageArgs).
func isUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command ") || strings.HasPrefix(s, "required flag(s) ")
}

// usageArgs makes every argument-count error of cmd and its subcommands a
// usage error (exit 2).
func usageArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			return nil
		}
	}
	if cmd.HasParent() && cmd.HasSubCommands() && !cmd.Runnable() {
		// A group (xactl log, sink, heuristic): cobra would print its help
		// for any argument and exit 0; an unknown subcommand is a usage
		// error, as at the top level.
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
			}
			return usageErr("%s\nRun '%s --help' for its commands", msg, c.CommandPath())
		}
		// Its usage names its commands only, as before it could run.
		cmd.SetUsageTemplate(strings.Replace(cmd.UsageTemplate(), "{{if .Runnable}}\n  {{.UseLine}}{{end}}", "", 1))
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "xactl",
		Short: "Inspect and resolve in-doubt XA transactions across MySQL/MariaDB and PostgreSQL",
		Long: `xactl works with the xa transaction manager's participants and decision log.

A global transaction prepares a branch in every database, makes its commit
decision durable in the decision log, then commits every branch. If a
coordinator dies in between, branches stay prepared ("in doubt"), holding
locks. xactl shows them, resolves them from the decision log (commit where a
commit was logged, roll back where none was and the grace period is over),
and lets an operator decide by hand when needed.

It also sets up, runs and inspects the exactly-once sinks of the
configuration (xactl sink): their branches are their own restore's to
resolve, and xactl shows them as theirs.

The decision log is created once, by 'xactl log init' (or by the
application, with filelog.Create); every other command opens an existing
log and refuses a directory without one. The log's identity holds the global
transaction timeout and the presumed-abort grace period that the
coordinator, its recovery and xactl all apply.

The configuration comes from a YAML file (--config, $XACTL_CONFIG, or
./xactl.yaml), overridden by XACTL_NODE and XACTL_LOG_DIR and then by
flags:

` + indent(config.Example, "  ") + `
Exit codes: 0 ok, 1 error, 2 usage, 3 in-doubt branches remain (sink
status: branches its restore will not resolve by itself).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// The output format is chosen once, for every command.
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if g.timeout < minOpTimeout {
				return usageErr("--op-timeout %v: must be at least %v (the time limit for the whole command)", g.timeout, minOpTimeout)
			}
			p, err := g.newPrinter()
			if err != nil {
				return err
			}
			g.out = p
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&g.configPath, "config", "c", "", "configuration file (default $XACTL_CONFIG or ./xactl.yaml)")
	pf.StringVar(&g.node, "node", "", "transaction manager node id (default: the decision log's; overrides config and $XACTL_NODE)")
	pf.StringVar(&g.logDir, "log-dir", "", "decision log directory (overrides config and $XACTL_LOG_DIR)")
	pf.StringVarP(&g.output, "output", "o", "", "output format: table or json (default $XACTL_OUTPUT or table)")
	pf.BoolVarP(&g.verbose, "verbose", "v", false, "log what is done")
	pf.DurationVar(&g.timeout, "op-timeout", 2*time.Minute, "time limit for the whole command (not for --watch)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: ExitUsage, err: err} })

	root.AddCommand(newList(g), newRecover(g), newResolve(g, true), newResolve(g, false),
		newLog(g), newParticipant(g), newNodes(g), newHeuristic(g), newDoctor(g), newSink(g), newVersion(g))
	usageArgs(root)
	return root
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString(prefix)
		}
		b.WriteString(l)
	}
	return b.String()
}

// loadConfig reads the configuration, applies env and flags, and checks
// that it has what the command needs.
func (g *globals) loadConfig(need config.Need) (*config.Config, error) {
	path := g.configPath
	explicit := path != ""
	if path == "" {
		path = g.getenv("XACTL_CONFIG")
		explicit = path != ""
	}
	if path == "" {
		path = "xactl.yaml"
	}
	var c *config.Config
	noFile := "" // the default file, not found
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && !explicit {
		c = &config.Config{} // no file: env and flags only
		noFile = path
		if abs, err := filepath.Abs(path); err == nil {
			noFile = abs
		}
	} else {
		var err error
		if c, err = config.Load(path); err != nil {
			return nil, &exitError{code: ExitUsage, err: err}
		}
	}
	if err := c.ApplyEnv(g.getenv); err != nil {
		return nil, &exitError{code: ExitUsage, err: err}
	}
	if g.node != "" {
		c.Node = g.node
	}
	if g.logDir != "" {
		c.Log.Dir = g.logDir
	}
	if g.logKind != "" {
		c.Log.Kind = g.logKind
	}
	if g.logDSN != "" {
		c.Log.DSN = g.logDSN
	}
	c.Defaults()
	if err := c.Validate(need); err != nil {
		if noFile != "" {
			return nil, &exitError{code: ExitUsage, err: fmt.Errorf("%w\nNo configuration file was read: %s does not exist. "+
				"Name one with --config or $XACTL_CONFIG (see xactl --help for its format)", err, noFile)}
		}
		return nil, &exitError{code: ExitUsage, err: fmt.Errorf("%w\n(see xactl --help for the configuration file)", err)}
	}
	return c, nil
}

func (g *globals) logger() *slog.Logger {
	lvl := slog.LevelWarn
	if g.verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: lvl}))
}

func age(d time.Duration, known bool) string {
	if !known {
		return "?"
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

func newVersion(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print xactl's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(g.stdout, "xactl", Version)
			return nil
		},
	}
}

// Version is set at build time with -ldflags "-X github.com/xadb/xa/internal/cli.Version=...".
var Version = "dev"
