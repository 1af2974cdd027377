package bank

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/lab/crashpoint"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// Participant names used by the worker; recovery must use the same.
const (
	MySQLName    = "mysql"
	PostgresName = "postgres"
	// DecisionTable is the PostgreSQL table of decisions taken by the
	// last resource; recovery must read it (postgres.Config).
	DecisionTable = "xa_decisions"
)

// WorkerConfig configures a coordinator process running transfers.
type WorkerConfig struct {
	MySQLDSN, PGDSN string
	LogDir          string // the decision log (filelog): created before the worker starts
	Node            string
	Accounts        int
	Workers         int       // concurrent transfers
	Transfers       int       // per worker; 0 runs until ctx ends
	Crash           string    // crashpoint spec, "" for none
	Seed            uint64    // for the random transfers
	Fixed           *Transfer // if set, every transfer is this one
	// LastResource makes PostgreSQL the last resource (a decision table
	// instead of the log for the decision, see postgres.Config).
	LastResource bool
	Timeout      time.Duration // global transaction timeout
	// Phase-2 settings of the manager (0: xa's defaults); the log's grace
	// must cover them.
	Phase2Attempts int
	Phase2Timeout  time.Duration
	Logger         *slog.Logger
}

// RunWorker runs transfers and writes one line per finished transfer to
// out, as soon as the coordinator knows:
//
//	committed <global id>        told committed (every branch acknowledged)
//	pending <global id>          told committed, some branch left to recovery
//	aborted <global id> <reason> told aborted: nothing committed
//	unknown <global id> <reason> told outcome unknown
//
// A crash test kills the process (possibly through Crash) and compares the
// lines it received with the databases.
func RunWorker(ctx context.Context, cfg WorkerConfig, out io.Writer) error {
	trig, err := crashpoint.Parse(cfg.Crash)
	if err != nil {
		return err
	}
	log, err := filelog.Open(cfg.LogDir, filelog.Options{Logger: cfg.Logger})
	if err != nil {
		return err
	}
	defer log.Close()
	my, err := xamysql.Open(ctx, xamysql.Config{Name: MySQLName, DSN: cfg.MySQLDSN, MaxConns: 2 * cfg.Workers, Logger: cfg.Logger, Init: true})
	if err != nil {
		return err
	}
	defer my.Close()
	pgCfg := xapg.Config{Name: PostgresName, DSN: cfg.PGDSN, MaxConns: int32(2 * cfg.Workers), Logger: cfg.Logger, Init: true}
	if cfg.LastResource {
		pgCfg.DecisionTable = DecisionTable
	}
	pg, err := xapg.Open(ctx, pgCfg)
	if err != nil {
		return err
	}
	defer pg.Close()
	mgr, err := xa.NewManager(xa.Config{Node: cfg.Node, Log: trig.WrapLog(log), Timeout: cfg.Timeout, Logger: cfg.Logger,
		Phase2Attempts: cfg.Phase2Attempts, Phase2Timeout: cfg.Phase2Timeout})
	if err != nil {
		return err
	}
	myP, pgP := trig.WrapRM(my), trig.WrapRM(pg)
	// Recovery of this node runs at start-up and every few seconds, as in
	// any process that runs a Manager.
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{my, pg}, Log: log, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	_, stop, err := sc.Start(ctx, 5*time.Second, nil)
	defer stop()
	if err != nil {
		return fmt.Errorf("recovery at start-up: %w", err)
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
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
			for i := 0; cfg.Transfers == 0 || i < cfg.Transfers; i++ {
				if ctx.Err() != nil {
					return
				}
				t := Random(r, cfg.Accounts)
				if cfg.Fixed != nil {
					t = *cfg.Fixed
				}
				res, err := mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error { return Do(ctx, tx, myP, pgP, t) })
				switch {
				case err == nil && len(res.Pending) > 0:
					emit("pending %s", res.ID)
				case err == nil:
					emit("committed %s", res.ID)
				case errors.Is(err, xa.ErrAborted):
					emit("aborted %s %q", res.ID, err.Error())
				case xa.OutcomeUnknown(err):
					emit("unknown %s %q", res.ID, err.Error())
				default:
					emit("aborted %s %q", res.ID, err.Error())
				}
			}
		}(w)
	}
	wg.Wait()
	return nil
}
