package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// participant is an open resource manager with what xactl needs of it.
type participant struct {
	cfg config.Participant
	rm  xa.ResourceManager
	// checker is the driver's start-up check.
	checker interface {
		Check(ctx context.Context) ([]xa.Finding, error)
	}
	close func()
}

// participants are the configured participants as a command opened them.
type participants struct {
	open []*participant
	// unreachable: configured, but could not be opened (name -> why).
	unreachable map[string]error
	names       []string // every configured name, in order
}

func (ps *participants) Close() {
	for _, p := range ps.open {
		p.close()
	}
}

func (ps *participants) rms() []xa.ResourceManager {
	out := make([]xa.ResourceManager, len(ps.open))
	for i, p := range ps.open {
		out[i] = p.rm
	}
	return out
}

// openErrors returns why each participant that could not be opened could
// not, in configuration order.
func (ps *participants) openErrors() []error {
	var errs []error
	for _, n := range ps.names {
		if err := ps.unreachable[n]; err != nil {
			errs = append(errs, fmt.Errorf("participant %q could not be opened: %w", n, err))
		}
	}
	return errs
}

// openParticipants opens every participant without running its start-up
// check (doctor runs it and reports; the other commands must work on a
// server that fails it, to clean up), after making sure it can connect.
// A participant that cannot be opened is left out and kept in
// unreachable, with why.
func openParticipants(ctx context.Context, c *config.Config, log *slog.Logger) *participants {
	ps := &participants{unreachable: map[string]error{}}
	for _, pc := range c.Participants {
		ps.names = append(ps.names, pc.Name)
		p, err := openParticipant(ctx, pc, log)
		if err != nil {
			ps.unreachable[pc.Name] = err
			continue
		}
		ps.open = append(ps.open, p)
	}
	return ps
}

func openParticipant(ctx context.Context, pc config.Participant, log *slog.Logger) (*participant, error) {
	switch pc.Driver {
	case "mysql":
		rm, err := xamysql.Open(ctx, xamysql.Config{Name: pc.Name, DSN: pc.DSN, MaxConns: pc.MaxConns, Logger: log, SkipCheck: true})
		if err != nil {
			return nil, explainConnErr(err)
		}
		// With SkipCheck the driver does not connect: a wrong password
		// would surface at the first listing, as a privilege problem.
		if err := pingMySQL(ctx, pc.DSN); err != nil {
			rm.Close()
			return nil, err
		}
		return &participant{cfg: pc, rm: rm, checker: rm, close: func() { rm.Close() }}, nil
	case "postgres":
		rm, err := xapg.Open(ctx, xapg.Config{Name: pc.Name, DSN: pc.DSN, MaxConns: int32(pc.MaxConns), Logger: log, SkipCheck: true,
			DecisionTable: pc.DecisionTable})
		if err != nil {
			return nil, explainConnErr(err)
		}
		return &participant{cfg: pc, rm: rm, checker: rm, close: rm.Close}, nil
	}
	return nil, fmt.Errorf("unknown driver %q", pc.Driver)
}

// pingMySQL connects once to dsn.
func pingMySQL(ctx context.Context, dsn string) error {
	mc, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("invalid DSN: %w", err)
	}
	db, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		if what, fix := connProblem(err); what != "" {
			return &connError{what: fmt.Sprintf("%s as %q at %s", what, mc.User, mc.Addr), fix: fix, err: err}
		}
		return fmt.Errorf("cannot connect to %s as %q: %w", mc.Addr, mc.User, err)
	}
	return nil
}

// connProblem says what kind of connection failure err is, and what to
// do, when it is one that a driver may report under another name: the
// MySQL driver classifies "access denied" (1045) as xa.ErrMisconfigured,
// "misconfigured for two-phase commit", and the PostgreSQL driver says
// "cannot reach the database" of a refused login, although a wrong user or
// password has nothing to do with either. "" for anything else.
func connProblem(err error) (what, fix string) {
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1045: // ER_ACCESS_DENIED_ERROR
			return "authentication failed", "check the user and password in the DSN, and that the user may connect from this host"
		case 1044: // ER_DBACCESS_DENIED_ERROR
			return "access to the database denied", "grant the user access to the database named in the DSN"
		case 1049: // ER_BAD_DB_ERROR
			return "no such database", "check the database named in the DSN"
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "28P01":
			return "authentication failed", "check the user and password in the DSN"
		case strings.HasPrefix(pe.Code, "28"):
			return "the server refused the login", "check the user in the DSN, and the server's pg_hba.conf"
		case pe.Code == "3D000":
			return "no such database", "check the database named in the DSN"
		}
	}
	return "", ""
}

// explainConnErr rewrites a driver's error whose real cause is a failed
// connection or login, so that it says so first.
func explainConnErr(err error) error {
	if what, fix := connProblem(err); what != "" {
		return &connError{what: what, fix: fix, err: err}
	}
	return err
}

// connError is a connection or login failure; it still matches the
// driver's error.
type connError struct {
	what, fix string
	err       error
}

func (e *connError) Error() string {
	// The server's own message, without the driver's classification.
	msg := e.err.Error()
	var me *gomysql.MySQLError
	var pe *pgconn.PgError
	switch {
	case errors.As(e.err, &me):
		msg = me.Error()
	case errors.As(e.err, &pe):
		msg = pe.Error()
	}
	return fmt.Sprintf("%s (%s): %s", e.what, e.fix, msg)
}

func (e *connError) Unwrap() error { return e.err }

// explainAll applies explainConnErr to errors of a scan, keeping the
// scan's own words for which participant failed.
func explainAll(errs []error) []error {
	out := make([]error, len(errs))
	for i, err := range errs {
		out[i] = err
		if what, _ := connProblem(err); what != "" {
			var xe *xa.Error
			if errors.As(err, &xe) {
				out[i] = fmt.Errorf("participant %q: %s: %w", xe.RM, xe.Op, explainConnErr(err))
			} else {
				out[i] = explainConnErr(err)
			}
		}
	}
	return out
}

// newScanner returns the recovery scanner over ps and log. Its grace and
// nodes are the log's (recovery.grace may lengthen the grace, and
// recovery.nodes name more nodes).
func newScanner(c *config.Config, ps *participants, log xa.RecoveryLog, logger *slog.Logger) (*recovery.Scanner, error) {
	return recovery.New(recovery.Config{
		Participants: ps.rms(),
		Log:          log,
		Nodes:        c.Recovery.Nodes,
		Grace:        time.Duration(c.Recovery.Grace),
		Unreachable:  ps.unreachable,
		Logger:       logger,
	})
}
