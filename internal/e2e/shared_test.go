package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery"
	"github.com/xadb/xa/xa"
)

// stallRM wraps a participant whose branches never get their phase-2
// commit through (as if the coordinator died after its decision): the
// coordinator gives them up to recovery, prepared, and releases their
// sessions.
type stallRM struct{ xa.ResourceManager }

func (r stallRM) Start(ctx context.Context, x xa.XID) (xa.Branch, error) {
	b, err := r.ResourceManager.Start(ctx, x)
	if err != nil {
		return nil, err
	}
	return stallBranch{b}, nil
}

type stallBranch struct{ xa.Branch }

var errStalled = fmt.Errorf("%w: the test holds phase 2 back", xa.ErrRetryable)

func (b stallBranch) Commit(context.Context) error { return errStalled }

func (b stallBranch) Origin() xa.Origin {
	if o, ok := b.Branch.(xa.OriginReporter); ok {
		return o.Origin()
	}
	return xa.Origin{}
}

// undecidedLog loses the decision: the write's outcome is unknown, so the
// coordinator leaves the prepared branches to recovery with no record.
type undecidedLog struct{ xa.DecisionLog }

func (undecidedLog) LogCommit(context.Context, xa.CommitRecord) error {
	return &xa.Error{Op: "log", Kind: xa.ErrOutcomeUnknown, Err: errors.New("the test lost the write")}
}

// TestTwoDatabasesOnOneMariaDB: two participants are two databases of one
// MariaDB server, whose XA RECOVER lists the whole server's branches. Each
// branch is listed once, attributed to the participant its record names,
// committed (or presumed aborted) once, with no "anomaly" and nothing left
// in doubt; before, each participant saw the other's branches and the scan
// reported them as anomalies (the first xactl recover exited 3).
func TestTwoDatabasesOnOneMariaDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbs := []*dbtest.DB{dbtest.MySQLDB(t), dbtest.MySQLDB(t)}
	pgdb := dbtest.PostgresDB(t)
	b := newBank(t, dbs[0], pgdb, 2) // for its log and node
	var rms []xa.ResourceManager
	for i, db := range dbs {
		if err := db.Server.Exec(ctx, db.Name, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"); err != nil {
			t.Fatal(err)
		}
		rm, err := xamysql.Open(ctx, xamysql.Config{Name: fmt.Sprintf("maria%d", i+1), DSN: db.DSN(), Init: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rm.Close() })
		rms = append(rms, rm)
	}
	if _, ok := rms[0].(recovery.SharedServer); !ok {
		t.Fatal("drivers/mysql does not implement recovery.SharedServer")
	}
	if err := pgdb.Server.Exec(ctx, pgdb.Name, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	pg, err := xapg.Open(ctx, xapg.Config{Name: "pg", DSN: pgdb.DSN(), Init: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	rms = append(rms, pg)

	log := b.openLog()
	t.Cleanup(func() { log.Close() })
	run := func(dl xa.DecisionLog, wrap func(xa.ResourceManager) xa.ResourceManager, k int) (xa.Result, error) {
		mgr, err := xa.NewManager(xa.Config{Node: b.node, Log: dl, Timeout: b.timeout, Phase2Attempts: 1, Phase2Timeout: testPhase2Timeout})
		if err != nil {
			t.Fatal(err)
		}
		return mgr.Run(ctx, func(ctx context.Context, tx *xa.Tx) error {
			for i, rm := range rms {
				s, err := tx.Enlist(ctx, wrap(rm))
				if err != nil {
					return err
				}
				switch c := s.(type) {
				case *xamysql.Conn:
					_, err = c.ExecContext(ctx, "INSERT INTO kv VALUES (?, ?)", k, i)
				case *xapg.Conn:
					_, err = c.Exec(ctx, "INSERT INTO kv VALUES ($1, $2)", k, i)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	// Transaction 1: decided, phase 2 held back on all three branches.
	res, err := run(log, func(rm xa.ResourceManager) xa.ResourceManager { return stallRM{rm} }, 1)
	if err != nil || len(res.Pending) != 3 {
		t.Fatalf("decided transaction: %+v, %v; want committed with 3 branches pending", res, err)
	}
	// Transaction 2: prepared everywhere, its decision lost.
	if _, err := run(undecidedLog{log}, func(rm xa.ResourceManager) xa.ResourceManager { return rm }, 2); !xa.OutcomeUnknown(err) {
		t.Fatalf("undecided transaction: %v; want outcome unknown", err)
	}

	sc, err := recovery.New(recovery.Config{Participants: rms, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(b.grace() + time.Minute)
	seen := map[string]string{}
	for {
		rep, err := sc.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for _, br := range rep.Branches {
			if br.ID.Node != b.node {
				continue
			}
			counts[br.Prepared.XID.String()]++
			if br.Verdict == recovery.Anomaly {
				t.Fatalf("%s listed through %s reported as an anomaly: %s", br.Prepared.XID, br.Participant, br.Reason)
			}
			if p, ok := seen[br.Prepared.XID.String()]; ok && p != br.Participant {
				t.Fatalf("%s attributed to %s, then to %s", br.Prepared.XID, p, br.Participant)
			}
			seen[br.Prepared.XID.String()] = br.Participant
		}
		for x, n := range counts {
			if n != 1 {
				t.Fatalf("%s reported %d times in one scan", x, n)
			}
		}
		recs, _ := log.Commits(ctx)
		if rep.InDoubt() == 0 && len(recs) == 0 && len(rep.Errors) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("recovery did not finish: %d in doubt, %d records, kept %v, errors %v", rep.InDoubt(), len(recs), rep.Kept, rep.Errors)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("attribution: %v", seen)
	if len(seen) != 6 {
		t.Fatalf("saw %d branches of ours, want 6 (three per transaction)", len(seen))
	}
	// Transaction 1 committed in all three databases, transaction 2 in none.
	for i, db := range dbs {
		for k, want := range map[int]bool{1: true, 2: false} {
			var n int
			if err := count(ctx, db.DSN(), k, &n); err != nil {
				t.Fatal(err)
			}
			if (n == 1) != want {
				t.Errorf("maria%d: row %d present = %v, want %v", i+1, k, n == 1, want)
			}
		}
	}
}

// count reads how many rows of kv have key k, with direct SQL.
func count(ctx context.Context, dsn string, k int, n *int) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.QueryRowContext(ctx, "SELECT COUNT(*) FROM kv WHERE k = ?", k).Scan(n)
}
