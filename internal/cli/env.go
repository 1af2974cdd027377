package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/xadb/xa/drivers"
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
	return openParticipantWith(ctx, pc, log, drivers.Options{})
}

// openParticipantWith opens a participant with extra options (Init, for
// xactl participant init: never for recovery, which must find the stores
// the decisions were made in, not make new ones).
func openParticipantWith(ctx context.Context, pc config.Participant, log *slog.Logger, extra drivers.Options) (*participant, error) {
	// Without the check (see openParticipants), but connected: a wrong
	// address, user or password fails here, as xa.ErrConnect; a database
	// without the participant's identity, as xa.ErrIdentity.
	p, err := drivers.Open(ctx, pc.Driver, drivers.Options{Name: pc.Name, DSN: pc.DSN, MaxConns: pc.MaxConns,
		DecisionTable: pc.DecisionTable, IdentityTable: pc.IdentityTable, Logger: log, SkipCheck: true,
		Init: extra.Init, Adopt: extra.Adopt})
	if err != nil {
		return nil, explainConnErr(err)
	}
	return &participant{cfg: pc, rm: p, checker: p, close: func() { p.Close() }}, nil
}

// explainConnErr puts first what a failed connection or login was (the
// driver's words, with the fix), instead of the error's op and kind.
func explainConnErr(err error) error {
	var xe *xa.Error
	if errors.Is(err, xa.ErrConnect) && errors.As(err, &xe) && xe.Err != nil {
		return &connError{err: err, text: xe.Err.Error()}
	}
	return err
}

// connError is a connection or login failure; it still matches the
// driver's error.
type connError struct {
	err  error
	text string
}

func (e *connError) Error() string { return e.text }
func (e *connError) Unwrap() error { return e.err }

// explainAll applies explainConnErr to errors of a scan, keeping the
// scan's own words for which participant failed.
func explainAll(errs []error) []error {
	out := make([]error, len(errs))
	for i, err := range errs {
		out[i] = err
		var xe *xa.Error
		if errors.Is(err, xa.ErrConnect) && errors.As(err, &xe) {
			out[i] = fmt.Errorf("participant %q: %s: %w", xe.RM, xe.Op, explainConnErr(err))
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

// recoveryEnv is what list, recover, commit, rollback and doctor work on:
// the configured decision log, the participants, and the scanner over
// them, opened the one way xactl opens them.
type recoveryEnv struct {
	log *decisionLog
	ps  *participants
	sc  *recovery.Scanner
}

// openRecovery opens the decision log in mode, every participant
// (openParticipants: one that cannot be opened is left out, with why),
// and the scanner over them. Close closes them.
func openRecovery(ctx context.Context, c *config.Config, mode logMode, logger *slog.Logger) (*recoveryEnv, error) {
	log, err := openDecisionLog(c, mode, logger)
	if err != nil {
		return nil, err
	}
	ps := openParticipants(ctx, c, logger)
	sc, err := newScanner(c, ps, log, logger)
	if err != nil {
		ps.Close()
		log.Close()
		return nil, err
	}
	return &recoveryEnv{log: log, ps: ps, sc: sc}, nil
}

// Close closes the participants, then the decision log.
func (e *recoveryEnv) Close() {
	e.ps.Close()
	e.log.Close()
}
