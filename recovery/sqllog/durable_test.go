package sqllog_test

import (
	"context"
	"testing"
	"time"

	"github.com/xadb/xa/internal/logdb"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/sqllog"
)

// TestDurableWhateverTheSession: the log's database makes every session
// asynchronous (synchronous_commit = off: a commit returns before its WAL
// is flushed). A commit decision must still be flushed before LogCommit
// returns: the batch's statement forces synchronous_commit on for its own
// transaction. The WAL writer is slowed down (10 s), so that WAL left
// unflushed by a commit stays so while the test looks; a plain insert in
// the same database shows it does.
func TestDurableWhateverTheSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := dbtest.NewPostgresServer(t, dbtest.Setting("wal_writer_delay", "10000ms"))
	tdb := srv.CreateDB(t)
	if err := srv.Exec(ctx, tdb.Name, "ALTER DATABASE "+tdb.Name+" SET synchronous_commit = off", "CREATE TABLE plain (x int)"); err != nil {
		t.Fatal(err)
	}
	db, d, err := logdb.Open(logdb.Postgres, tdb.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := newStore(t, db, d, sqllog.Options{LeaseTTL: time.Minute})
	l, err := s.Create(ctx, newIdent(t, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var setting string
	if err := db.QueryRow(`SHOW synchronous_commit`).Scan(&setting); err != nil || setting != "off" {
		t.Fatalf("the database's sessions: synchronous_commit = %q (%v), want off", setting, err)
	}
	unflushed := func() int64 {
		t.Helper()
		var n int64
		if err := db.QueryRow(`SELECT pg_current_wal_insert_lsn() - pg_current_wal_flush_lsn()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 5 {
		if _, err := db.Exec(`INSERT INTO plain VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		plain := unflushed()
		if err := l.LogCommit(ctx, record(t, l, time.Now())); err != nil {
			t.Fatal(err)
		}
		logged := unflushed()
		t.Logf("round %d: WAL bytes not flushed after a plain insert: %d; after LogCommit: %d", i, plain, logged)
		if plain == 0 {
			t.Skip("the plain insert's WAL was flushed: the server flushes anyway, the test cannot tell")
		}
		if logged != 0 {
			t.Fatalf("LogCommit returned with %d bytes of WAL not flushed: the decision is not durable", logged)
		}
	}
}
