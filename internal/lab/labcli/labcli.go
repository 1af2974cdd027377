// Package labcli is xalab, the lab's command-line tool: the demo (a
// cross-database commit surviving a coordinator killed with SIGKILL, and
// its recovery with xactl; then the exactly-once sink surviving its own
// SIGKILL), the benchmarks, and the demo's processes (the hidden
// bank-worker and sink-worker commands, which kill themselves at their
// crash points). cmd/xalab only calls Main.
//
// None of this is in xactl, the operator's tool: the lab may import the
// product (xa, the drivers, recovery, and xactl itself through
// cli.MainContext), never the other way round (internal/layout enforces
// it).
package labcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/xadb/xa/internal/testrig/localdb"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// globals are what every command shares.
type globals struct {
	verbose        bool
	stdout, stderr io.Writer
	getenv         func(string) string
}

// Main runs xalab with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return MainContext(ctx, args, stdout, stderr)
}

// MainContext is Main with a given context: ending it stops the command as
// SIGINT does.
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
	fmt.Fprintln(stderr, "xalab:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if s := err.Error(); strings.HasPrefix(s, "unknown command ") || strings.HasPrefix(s, "required flag(s) ") {
		return ExitUsage
	}
	return ExitError
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "xalab",
		Short: "The xa lab: the demo and the benchmark (not for production use)",
		Long: `xalab runs the lab of the xa transaction manager, on throw-away MariaDB and
PostgreSQL servers (or on databases you name):

  demo   concurrent cross-database transfers, the coordinator killed with
         SIGKILL right after a commit decision, recovery with xactl, and the
         invariants checked with direct SQL; then a Kafka stream into both
         databases through the exactly-once sink, the sink killed mid-commit
         and restarted, every record checked to be there exactly once
  bench  what atomicity costs: local commits vs hand-written 2PC vs the
         transaction manager, and the decision log alone (embedded vs Pebble);
         bench sink: the exactly-once sink vs batched at-least-once writes

It is not the operator's tool: that is xactl, which carries none of this
(no crash injection, no Pebble, no workload).

Exit codes: 0 ok, 1 error (a failed check included), 2 usage.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "log what is done")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: ExitUsage, err: err} })
	root.AddCommand(newDemo(g), newBench(g), newWorker(g), newBankSetup(g), newSinkWorker(g))
	usageArgs(root)
	return root
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
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}

func (g *globals) logger() *slog.Logger {
	lvl := slog.LevelWarn
	if g.verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: lvl}))
}

// dsns returns the DSNs of the flags, else of XA_MYSQL_DSN and
// XA_POSTGRES_DSN: both or neither.
func (g *globals) dsns(mysqlDSN, pgDSN string) (string, string, error) {
	if mysqlDSN == "" {
		mysqlDSN = g.getenv("XA_MYSQL_DSN")
	}
	if pgDSN == "" {
		pgDSN = g.getenv("XA_POSTGRES_DSN")
	}
	if (mysqlDSN == "") != (pgDSN == "") {
		return "", "", usageErr("give both --mysql-dsn and --postgres-dsn, or neither")
	}
	return mysqlDSN, pgDSN, nil
}

// table starts a table on w; rows are tab-separated; call Flush.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 2, 4, 2, ' ', 0) }

// startServers starts throw-away MariaDB and PostgreSQL servers side by
// side, each with an empty database called name.
func startServers(ctx context.Context, name string) (my, pg *localdb.Server, err error) {
	return startServersWith(ctx, name, nil, nil)
}

// startServersWith is startServers with server settings for each.
func startServersWith(ctx context.Context, name string, mySettings, pgSettings map[string]string) (my, pg *localdb.Server, err error) {
	var e1, e2 error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); my, e1 = localdb.Start(ctx, localdb.MySQL, mySettings) }()
	pg, e2 = localdb.Start(ctx, localdb.Postgres, pgSettings)
	wg.Wait()
	if err := errors.Join(e1, e2); err != nil {
		return nil, nil, err
	}
	if err := errors.Join(my.Exec(ctx, "", "CREATE DATABASE "+name), pg.Exec(ctx, "", "CREATE DATABASE "+name)); err != nil {
		return nil, nil, err
	}
	return my, pg, nil
}
