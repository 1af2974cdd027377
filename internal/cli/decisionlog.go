package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"time"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// logMode says how a command uses the decision log.
type logMode struct {
	write  bool
	create *xa.LogIdentity
}

var (
	// readOnly: a snapshot, read without taking the log, so that it works
	// while a transaction manager has the log open (list, recover
	// --dry-run, doctor). Writes fail.
	readOnly = logMode{}
	// forWriting: the log is taken, and refused while a transaction
	// manager has it open (recover, commit, rollback, heuristic clear).
	forWriting = logMode{write: true}
)

// creating: a new log with identity ident is made, and refused where one
// exists (log init).
func creating(ident xa.LogIdentity) logMode { return logMode{write: true, create: &ident} }

// decisionLog is the decision log as a command opened it.
type decisionLog struct {
	xa.RecoveryLog
	// where names the log for messages.
	where string
	// inUse: read-only, while another process had the log open: its
	// newest records may have changed since.
	inUse bool
	close func() error
}

// Close releases the log.
func (l *decisionLog) Close() error { return l.close() }

// Presumption passes the log's answer on (recovery.Leased): a shared log
// opened without its lease never lets xactl presume abort.
func (l *decisionLog) Presumption(ctx context.Context) (recovery.Presumption, string, error) {
	if ld, ok := l.RecoveryLog.(recovery.Leased); ok {
		return ld.Presumption(ctx)
	}
	return recovery.PresumeAfterGrace, "", nil
}

// openDecisionLog opens the decision log the configuration names, with the
// backend log.kind picks, in mode. It is the one place where xactl opens a
// decision log. It never creates one, except in mode creating. A log in a
// database (postgres, mysql) is opened without its lease, in every mode
// but creating: xactl works beside the live nodes (openSQLLog). The log's
// identity then decides the node (a configured node that differs is
// refused: config.CheckIdentity) and the timeout and grace everybody
// applies.
func openDecisionLog(c *config.Config, mode logMode, logger *slog.Logger) (*decisionLog, error) {
	var l *decisionLog
	var err error
	switch c.Log.Kind {
	case config.LogFile, "":
		l, err = openFileLog(c.Log.Dir, mode, logger)
	case config.LogPostgres, config.LogMySQL:
		l, err = openSQLLog(c, mode, logger)
	default: // config.Validate refuses other kinds
		return nil, usageErr("log.kind %q: no such decision log", c.Log.Kind)
	}
	if err != nil {
		return nil, err
	}
	if err := c.CheckIdentity(l.Identity()); err != nil {
		l.Close()
		return nil, &exitError{code: ExitUsage, err: err}
	}
	return l, nil
}

func openFileLog(dir string, mode logMode, logger *slog.Logger) (*decisionLog, error) {
	if dir == "" {
		return nil, usageErr("log.dir is not set (the decision log's directory: config, XACTL_LOG_DIR or --log-dir)")
	}
	where := "the decision log in " + dir
	switch {
	case mode.create != nil:
		l, err := filelog.Create(dir, *mode.create, filelog.Options{Logger: logger})
		if errors.Is(err, filelog.ErrExist) {
			return nil, fmt.Errorf("%w\nxactl log init creates a log only where there is none: nothing was changed. "+
				"xactl log verify shows the identity of the log there", err)
		}
		if err != nil {
			return nil, err
		}
		return &decisionLog{RecoveryLog: l, where: where, close: l.Close}, nil
	case mode.write:
		l, err := filelog.Open(dir, filelog.Options{Logger: logger})
		if errors.Is(err, filelog.ErrLocked) {
			return nil, fmt.Errorf("%w\nAnother process (a transaction manager or xactl recover --watch) has this decision log open: it resolves the in-doubt branches itself. "+
				"Stop it to resolve them with xactl, or use --dry-run / xactl list, which read the log without taking it", err)
		}
		if err != nil {
			return nil, logOpenHint(dir, err)
		}
		return &decisionLog{RecoveryLog: l, where: where, close: l.Close}, nil
	default:
		s, err := filelog.ReadSnapshot(dir)
		if err != nil {
			return nil, logOpenHint(dir, err)
		}
		return &decisionLog{RecoveryLog: s, where: where, inUse: s.InUse(), close: func() error { return nil }}, nil
	}
}

// logOpenHint adds to an error opening the log what the operator should
// do.
func logOpenHint(dir string, err error) error {
	switch {
	case errors.Is(err, filelog.ErrNoLog):
		what := "holds no decision log"
		if errors.Is(err, fs.ErrNotExist) {
			what = "does not exist"
		}
		return fmt.Errorf("%w\n%s %s: check log.dir (config, XACTL_LOG_DIR, --log-dir): it must be the directory of the "+
			"transaction manager's decision log. xactl opens only an existing log: in the wrong directory every in-doubt "+
			"branch would look undecided. A new log is made once, by xactl log init", err, dir, what)
	case errors.Is(err, filelog.ErrCorrupt):
		return fmt.Errorf("%w\nThe decision log in %s is damaged beyond a torn tail; nothing was changed and nothing is resolved "+
			"from it until it is repaired. See the damage with xactl log verify and the records with xactl log dump; "+
			"keep a copy of the directory and do not delete records by hand: every live commit record decides branches", err, dir)
	}
	return err
}

// identityView is a log's identity as xactl shows it.
type identityView struct {
	ID      string `json:"id"`
	Node    string `json:"node"`
	Created string `json:"created"`
	Timeout string `json:"timeout"`
	Grace   string `json:"grace"`
}

func viewIdentity(id xa.LogIdentity) *identityView {
	if id.ID == 0 {
		return nil
	}
	return &identityView{ID: id.ID.String(), Node: id.Node, Created: id.Created.UTC().Format(time.RFC3339Nano),
		Timeout: id.Timeout.String(), Grace: id.Grace.String()}
}

// text is the identity in one line.
func (v *identityView) text() string {
	if v == nil {
		return "unknown (no sound IDENTITY)"
	}
	return fmt.Sprintf("id %s, node %s, created %s, timeout %s, grace %s", v.ID, v.Node, v.Created, v.Timeout, v.Grace)
}

// printIdentity prints the identity as a small table.
func printIdentity(w io.Writer, v *identityView) {
	if v == nil {
		fmt.Fprintln(w, "identity: unknown (no sound IDENTITY file)")
		return
	}
	tw := table(w)
	fmt.Fprintf(tw, "id\t%s\n", v.ID)
	fmt.Fprintf(tw, "node\t%s\n", v.Node)
	fmt.Fprintf(tw, "created\t%s\n", v.Created)
	fmt.Fprintf(tw, "timeout\t%s\t(global transaction timeout of its coordinators)\n", v.Timeout)
	fmt.Fprintf(tw, "grace\t%s\t(no decision after this long: presumed abort)\n", v.Grace)
	tw.Flush()
}
