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
	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/recovery/sqllog"
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
	// LogKind "postgres" or "mysql" puts the decision log in the database
	// LogDSN (recovery/sqllog), which the nodes of one service share: the
	// node's log is created before the worker starts (xactl log init).
	LogKind, LogDSN string
	// LeaseTTL and LeaseWait are the shared log's (sqllog.Options).
	LeaseTTL, LeaseWait time.Duration
	// Takeover: with a shared log, take the logs of dead nodes over and
	// recover them (recovery.Takeover); its reports are printed.
	Takeover bool
	// ClockSkew puts the node's clock off by this much: it stamps the
	// transactions' begin times, and recovery measures MySQL branches'
	// ages by it.
	ClockSkew time.Duration
	// RecoveryInterval is the time between the node's recovery scans
	// (default 5s).
	RecoveryInterval time.Duration
	Node             string
	Accounts         int
	Workers          int       // concurrent transfers
	Transfers        int       // per worker; 0 runs until ctx ends
	Crash            string    // crashpoint spec, "" for none
	Seed             uint64    // for the random transfers
	Fixed            *Transfer // if set, every transfer is this one
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
// and, with a shared log, one line when it holds its log and one per
// takeover of a dead node's log:
//
//	lease <node> <holder> <epoch>
//	takeover <node> previous=<holder> expired_for=<d> resolved=<d> committed=<n> rolled_back=<n> released=<bool> err=<text>
//
// A crash test kills the process (possibly through Crash) and compares the
// lines it received with the databases.
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
	clock := time.Now
	if cfg.ClockSkew != 0 {
		clock = func() time.Time { return time.Now().Add(cfg.ClockSkew) }
	}
	var log xa.RecoveryLog
	var store *sqllog.Store
	switch cfg.LogKind {
	case "", "file":
		fl, err := filelog.Open(cfg.LogDir, filelog.Options{Logger: cfg.Logger})
		if err != nil {
			return err
		}
		defer fl.Close()
		log = fl
	default:
		idle := logdb.DefaultIdle
		if cfg.LeaseTTL > 0 {
			idle = max(cfg.LeaseTTL, 3*time.Second)
		}
		db, d, err := logdb.Open(cfg.LogKind, cfg.LogDSN, logdb.Options{Idle: idle})
		if err != nil {
			return err
		}
		defer db.Close()
		store, err = sqllog.NewStore(db, d, sqllog.Options{LeaseTTL: cfg.LeaseTTL, LeaseWait: cfg.LeaseWait, Clock: clock,
			Holder: sqllog.NewHolder(cfg.Node), Logger: cfg.Logger})
		if err != nil {
			return err
		}
		sl, err := store.Open(ctx, cfg.Node)
		if err != nil {
			return err
		}
		defer sl.Close()
		epoch, _ := sl.Epoch()
		emit("lease %s %s %d", cfg.Node, sl.Holder(), epoch)
		log = sl
	}
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
		Phase2Attempts: cfg.Phase2Attempts, Phase2Timeout: cfg.Phase2Timeout, Now: clock})
	if err != nil {
		return err
	}
	myP, pgP := trig.WrapRM(my), trig.WrapRM(pg)
	// Recovery of this node runs at start-up and every few seconds, as in
	// any process that runs a Manager.
	sc, err := recovery.New(recovery.Config{Participants: []xa.ResourceManager{my, pg}, Log: log, Logger: cfg.Logger, Now: clock})
	if err != nil {
		return err
	}
	interval := cfg.RecoveryInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	_, stop, err := sc.Start(ctx, interval, nil)
	defer stop()
	if err != nil {
		return fmt.Errorf("recovery at start-up: %w", err)
	}
	if store != nil && cfg.Takeover {
		// The dead nodes' logs: taken over once their lease expired.
		tk, err := recovery.NewTakeover(recovery.TakeoverConfig{Store: store.Peers(cfg.Node, nil), Participants: []xa.ResourceManager{my, pg},
			Interval: 500 * time.Millisecond, Logger: cfg.Logger, Report: func(r recovery.TakeoverReport) {
				emit("takeover %s previous=%s expired_for=%v resolved=%v committed=%d rolled_back=%d released=%v err=%v", r.Node, r.Previous,
					r.ExpiredFor.Round(time.Millisecond), r.Resolved.Round(time.Millisecond), r.Committed, r.RolledBack, r.Released, r.Err)
			}})
		if err != nil {
			return err
		}
		tctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { tk.Run(tctx); close(done) }()
		defer func() { cancel(); <-done }()
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
