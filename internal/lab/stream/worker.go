package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/xadb/xa/internal/lab/crashpoint"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/kafkasource"
	"github.com/xadb/xa/sink/sqlsink"
)

// WorkerConfig configures the sink's process.
type WorkerConfig struct {
	MySQLDSN, PGDSN string
	Brokers         []string
	// Crash is a crash point ("pgcommit:n": right before the n-th COMMIT
	// PREPARED reaches PostgreSQL, see crashpoint), "" for none.
	Crash string
	// CheckpointRecords and CheckpointInterval: when a checkpoint is
	// committed.
	CheckpointRecords  int
	CheckpointInterval time.Duration
	Logger             *slog.Logger
}

// RunWorker runs one instance of the sink, reading the topic in the
// demo's consumer group into both databases until ctx ends (or the crash
// point kills the process). It writes one line per event to out:
//
//	ready <pid>
//	checkpoint <n> committed <records>
//	checkpoint <n> aborted <records> <reason>
//	restore <what restore did>
//
// The sink's bookkeeping tables must exist (Setup).
func RunWorker(ctx context.Context, cfg WorkerConfig, out io.Writer) error {
	trig, err := crashpoint.Parse(cfg.Crash)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	emit := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		if f, ok := out.(interface{ Sync() error }); ok {
			f.Sync() //nolint:errcheck
		}
	}
	pgDSN := cfg.PGDSN
	if cfg.Crash != "" {
		// PostgreSQL through the crash point's proxy.
		u, err := url.Parse(pgDSN)
		if err != nil || u.Host == "" {
			return fmt.Errorf("stream: a crash point needs a postgres:// URL as the PostgreSQL DSN, not %q", pgDSN)
		}
		addr, stop, err := trig.Proxy(u.Host, "pgcommit", crashpoint.PGCommit)
		if err != nil {
			return err
		}
		defer stop()
		u.Host = addr
		pgDSN = u.String()
	}
	scfg := Config(cfg.MySQLDSN, pgDSN)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// What restore does is logged at Info: the demo shows it.
	scfg.Logger = slog.New(restoreLines{emit: emit, next: log.Handler()})
	s, err := sqlsink.Open(ctx, scfg)
	if err != nil {
		return err
	}
	defer s.Close()
	src, err := kafkasource.New(kafkasource.Config{
		Brokers:           cfg.Brokers,
		Group:             Group,
		Topics:            []string{Topic},
		SessionTimeout:    1500 * time.Millisecond,
		HeartbeatInterval: 300 * time.Millisecond,
		RebalanceTimeout:  5 * time.Second,
		MaxPollRecords:    500,
	})
	if err != nil {
		return err
	}
	defer src.Close()
	emit("ready %d", os.Getpid())
	err = s.Run(ctx, src, sink.RunOptions{
		CheckpointRecords:  cfg.CheckpointRecords,
		CheckpointInterval: cfg.CheckpointInterval,
		SweepInterval:      2 * time.Second,
		Observer:           observer{emit},
		Logger:             scfg.Logger,
	})
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil
	}
	return err
}

// observer reports each checkpoint's outcome.
type observer struct {
	emit func(format string, args ...any)
}

func (o observer) RecordsWritten(int) {}
func (o observer) PendingChanged(int) {}
func (o observer) CheckpointDone(c sink.CheckpointStats) {
	if c.Committed {
		o.emit("checkpoint %d committed %d", c.Checkpoint, c.Records)
		return
	}
	o.emit("checkpoint %d aborted %d %s", c.Checkpoint, c.Records, strings.ReplaceAll(fmt.Sprint(c.Err), "\n", " "))
}

// restoreLines writes the sink's log records about restore (committing,
// rolling back or fencing orphaned branches) as "restore" lines, and
// passes every record on.
type restoreLines struct {
	emit func(format string, args ...any)
	next slog.Handler
}

func (h restoreLines) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h restoreLines) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Message == "sink: restore":
		// One branch: what restore did with it, and why.
		a := map[string]string{}
		r.Attrs(func(at slog.Attr) bool {
			a[at.Key] = at.Value.String()
			return true
		})
		h.emit("restore %s: %s (%s)", a["checkpoint"], a["action"], a["why"])
	case strings.Contains(r.Message, "restore") || strings.Contains(r.Message, "orphan"):
		var sb strings.Builder
		sb.WriteString(strings.TrimPrefix(r.Message, "sink: "))
		r.Attrs(func(at slog.Attr) bool {
			fmt.Fprintf(&sb, " %s=%v", at.Key, at.Value)
			return true
		})
		h.emit("restore %s", strings.ReplaceAll(sb.String(), "\n", " "))
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h restoreLines) WithAttrs(as []slog.Attr) slog.Handler {
	return restoreLines{emit: h.emit, next: h.next.WithAttrs(as)}
}

func (h restoreLines) WithGroup(name string) slog.Handler {
	return restoreLines{emit: h.emit, next: h.next.WithGroup(name)}
}
