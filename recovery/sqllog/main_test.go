package sqllog_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/logtest"
	"github.com/xadb/xa/recovery/sqllog"
	"github.com/xadb/xa/xa"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// kinds are the log databases every test runs against: PostgreSQL, and
// MariaDB (MySQL under Docker).
var kinds = []string{logdb.Postgres, logdb.MySQL}

// newDB returns a fresh database for a log, of kind, opened as xactl
// opens it.
func newDB(t *testing.T, kind string) (*sql.DB, sqllog.Dialect, *dbtest.DB) {
	t.Helper()
	var tdb *dbtest.DB
	if kind == logdb.Postgres {
		tdb = dbtest.PostgresDB(t)
	} else {
		tdb = dbtest.MySQLDB(t)
	}
	db, d, err := logdb.Open(kind, tdb.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, d, tdb
}

func newStore(t *testing.T, db *sql.DB, d sqllog.Dialect, opts sqllog.Options) *sqllog.Store {
	t.Helper()
	s, err := sqllog.NewStore(db, d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// expire makes the lease of l's log expired in the database, as if its
// holder had stopped renewing it a TTL ago (and with a TTL of 0, so that
// the database's uptime does not hold the takeover back).
func expire(t *testing.T, db *sql.DB, d sqllog.Dialect, l *sqllog.Log) {
	t.Helper()
	q := `UPDATE xa_log_leases SET expires_us = 0, ttl_us = 0 WHERE log_id = ?`
	if d == sqllog.Postgres {
		q = `UPDATE xa_log_leases SET expires_us = 0, ttl_us = 0 WHERE log_id = $1`
	}
	if _, err := db.Exec(q, l.Identity().ID.String()); err != nil {
		t.Fatal(err)
	}
}

// TestConformance runs the decision-log conformance suite on the SQL log,
// in PostgreSQL and in MariaDB: the suite's clock replaces the database's
// (Options.DBNow) and the node's; a reopen is Close and Open (a new
// epoch); a takeover expires the lease in the database and takes it over
// from another store, as a live node does.
func TestConformance(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			type opened struct {
				db *sql.DB
				d  sqllog.Dialect
			}
			dbs := map[*sqllog.Log]opened{}
			logtest.Run(t, logtest.Harness{
				New: func(t *testing.T, ident xa.LogIdentity, now func() time.Time) xa.RecoveryLog {
					db, d, _ := newDB(t, kind)
					s := newStore(t, db, d, sqllog.Options{DBNow: now, Clock: now, LeaseTTL: time.Minute})
					l, err := s.Create(context.Background(), ident)
					if err != nil {
						t.Fatalf("Create: %v", err)
					}
					t.Cleanup(func() { l.Close() })
					dbs[l] = opened{db, d}
					return l
				},
				Reopen: func(t *testing.T, lg xa.RecoveryLog) xa.RecoveryLog {
					l := lg.(*sqllog.Log)
					if err := l.Close(); err != nil {
						t.Fatalf("Close: %v", err)
					}
					r, err := l.Store().Open(context.Background(), l.Identity().Node)
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					t.Cleanup(func() { r.Close() })
					dbs[r] = dbs[l]
					return r
				},
				TakeOver: func(t *testing.T, lg xa.RecoveryLog) xa.RecoveryLog {
					l := lg.(*sqllog.Log)
					o := dbs[l]
					expire(t, o.db, o.d, l)
					s := newStore(t, o.db, o.d, sqllog.Options{DBNow: nowOf(l), Clock: nowOf(l), LeaseTTL: time.Minute, Holder: "conformance-taker"})
					taker, err := s.TakeOver(context.Background(), l.Identity().ID, sqllog.TakeoverOptions{Reason: "the conformance suite"})
					if err != nil {
						t.Fatalf("TakeOver: %v", err)
					}
					t.Cleanup(func() { taker.Close() })
					return taker
				},
			})
		})
	}
}

func nowOf(l *sqllog.Log) func() time.Time { return l.Store().Options().DBNow }
