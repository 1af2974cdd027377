package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// wantKindCode checks that err matches kind and carries SQLSTATE code.
func wantKindCode(t testing.TB, what string, err, kind error, code string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.Is(err, kind) || !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("%s = %v; want %v with SQLSTATE %s", what, err, kind, code)
	}
}

// 42704: COMMIT PREPARED of an unknown gid is ErrUnknownXID (ambiguous);
// ROLLBACK PREPARED of one is success.
func TestPhase2UnknownXID(t *testing.T) {
	t.Parallel()
	_, rm := setup(t)
	ctx := testCtx(t)
	x := newXID(t)
	wantKindCode(t, "Commit of an unknown XID", rm.Commit(ctx, x, xa.Origin{}), xa.ErrUnknownXID, "42704")
	if err := rm.Rollback(ctx, x, xa.Origin{}); err != nil {
		t.Fatalf("Rollback of an unknown XID = %v, want nil", err)
	}
}

// 42501: only the preparing role (or a superuser) may finish a branch.
// The start-up check warns a role that is not superuser.
func TestPhase2OtherRole(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := testCtx(t)
	n := xidSeq.Add(1)
	alice, bob := fmt.Sprintf("alice_%d_%d", os.Getpid(), n), fmt.Sprintf("bob_%d_%d", os.Getpid(), n)
	if err := db.Server.Exec(ctx, "", "CREATE ROLE "+alice+" LOGIN", "CREATE ROLE "+bob+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		db.Server.Exec(ctx, db.Name, "DROP OWNED BY "+alice+", "+bob) //nolint:errcheck
		db.Server.Exec(ctx, "", "DROP ROLE "+alice+", "+bob)          //nolint:errcheck
	})
	mustExec(t, db, "GRANT ALL ON kv TO "+alice+", "+bob, "GRANT SELECT ON xa_participant TO "+alice+", "+bob)
	as := func(role string) *RM {
		u, err := url.Parse(db.DSN())
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		return openRM(t, u.String())
	}
	rmA, rmB := as(alice), as(bob)

	fs, err := rmA.Check(ctx)
	if err != nil {
		t.Fatalf("Check as %s: %v", alice, err)
	}
	if f := finding(fs, "superuser"); f.Severity != xa.SeverityWarn || !strings.Contains(f.Fix, "COMMIT PREPARED") {
		t.Fatalf("superuser finding for a plain role = %+v, want a warning that explains COMMIT PREPARED", f)
	}

	x := newXID(t)
	b, s := start(t, rmA, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	prepare(t, b, xa.VotePrepared)
	for what, err := range map[string]error{
		"Commit by another role":   rmB.Commit(ctx, x, xa.Origin{}),
		"Rollback by another role": rmB.Rollback(ctx, x, xa.Origin{}),
	} {
		wantKindCode(t, what, err, xa.ErrMisconfigured, "42501")
		if !strings.Contains(err.Error(), "fix: ") {
			t.Errorf("%s: %q says no fix", what, err)
		}
	}
	if err := rmA.Commit(ctx, x, xa.Origin{}); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 1, 1)
}

// 0A000: a branch prepared in another database cannot be finished from
// this one, and is not listed by Recover here.
func TestPhase2OtherDatabase(t *testing.T) {
	t.Parallel()
	db1, rm1 := setup(t)
	_, rm2 := setup(t)
	ctx := testCtx(t)
	x := newXID(t)
	b, s := start(t, rm1, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	prepare(t, b, xa.VotePrepared)
	wantKindCode(t, "Commit from another database", rm2.Commit(ctx, x, xa.Origin{}), xa.ErrMisconfigured, "0A000")
	wantKindCode(t, "Rollback from another database", rm2.Rollback(ctx, x, xa.Origin{}), xa.ErrMisconfigured, "0A000")
	ps, err := rm2.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.XID.Equal(x) {
			t.Fatal("Recover lists a branch of another database")
		}
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db1, 1, 1)
}

// On a private server that makes COMMIT PREPARED wait for a synchronous
// standby that does not exist, and has two prepared-transaction slots:
// 55000 busy (another session is finishing the branch) is ErrRetryable;
// 53200 (no free slot) at PREPARE is an abort vote with ErrMisconfigured.
func TestPhase2BusyAndNoSlot(t *testing.T) {
	t.Parallel()
	srv := dbtest.NewPostgresServer(t,
		dbtest.Setting("synchronous_standby_names", "nosuch"),
		dbtest.Setting("synchronous_commit", "local"), // only sessions that ask wait
		dbtest.Setting("max_prepared_transactions", "2"))
	db := srv.CreateDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)")
	rm := openRM(t, db.DSN())
	ctx := testCtx(t)

	fs, err := rm.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := finding(fs, "max_prepared_transactions"); f.Severity != xa.SeverityWarn {
		t.Fatalf("2 slots for a pool of 8: %+v, want a warning", f)
	}

	x := newXID(t)
	b, s := start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	prepare(t, b, xa.VotePrepared)

	finisher := raw(t, db)
	if _, err := finisher.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	finished := make(chan error, 1)
	go func() {
		_, err := finisher.PgConn().Exec(ctx, "COMMIT PREPARED "+quoteLiteral(x.String())).ReadAll()
		finished <- err
	}()
	waitFor(t, "COMMIT PREPARED waiting for the standby", func() bool {
		var n int
		raw(t, db).QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'",
			finisher.PgConn().PID()).Scan(&n) //nolint:errcheck
		return n == 1
	})
	wantKindCode(t, "Commit of a busy branch", b.Commit(ctx), xa.ErrRetryable, "55000")
	wantKindCode(t, "Rollback of a busy branch", rm.Rollback(ctx, x, xa.Origin{}), xa.ErrRetryable, "55000")
	if err := finisher.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-finished; err != nil {
		t.Fatalf("the other session's COMMIT PREPARED: %v", err) // cancelling the wait leaves it committed
	}
	wantKindCode(t, "Commit after another session committed", b.Commit(ctx), xa.ErrUnknownXID, "42704")
	wantValue(t, db, 1, 1)

	var held []xa.XID
	for i := 0; i < 3; i++ {
		x := newXID(t)
		b, s := start(t, rm, ctx, x)
		exec(t, s, "INSERT INTO kv VALUES ($1, $1)", 10+i)
		v, err := b.Prepare(ctx)
		if i < 2 {
			if v != xa.VotePrepared {
				t.Fatalf("Prepare %d = %v, %v", i, v, err)
			}
			held = append(held, x)
			continue
		}
		wantAbortCode(t, v, err, xa.ErrMisconfigured, "53200")
		if !strings.Contains(err.Error(), "max_prepared_transactions") {
			t.Errorf("no-slot error %q does not say what to raise", err)
		}
	}
	for _, x := range held {
		if err := rm.Rollback(ctx, x, xa.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	wantAbsent(t, db, 12)
}

// With max_prepared_transactions = 0, Open fails with ErrMisconfigured
// and says how to fix it; without the check, PREPARE does the same.
func TestPreparedTransactionsDisabled(t *testing.T) {
	t.Parallel()
	srv := dbtest.NewPostgresServer(t, dbtest.Setting("max_prepared_transactions", "0"))
	db := srv.CreateDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)")
	ctx := testCtx(t)

	_, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), Init: true})
	if !errors.Is(err, xa.ErrMisconfigured) {
		t.Fatalf("Open = %v, want ErrMisconfigured", err)
	}
	for _, want := range []string{"max_prepared_transactions", "postgresql.conf", "restart"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open error %q does not mention %q", err, want)
		}
	}

	rm := openRMWith(t, Config{DSN: db.DSN(), SkipCheck: true})
	fs, err := rm.Check(ctx)
	if !errors.Is(err, xa.ErrMisconfigured) || finding(fs, "max_prepared_transactions").Severity != xa.SeverityFail {
		t.Fatalf("Check = %+v, %v", fs, err)
	}
	x := newXID(t)
	b, s := start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	v, err := b.Prepare(ctx)
	wantAbortCode(t, v, err, xa.ErrMisconfigured, "55000")
	if !strings.Contains(err.Error(), "max_prepared_transactions") || !strings.Contains(err.Error(), "restart") {
		t.Errorf("PREPARE error %q does not say how to fix it", err)
	}
	wantAbsent(t, db, 1)

	// On this private server, a role that may not read pg_prepared_xacts:
	// the check fails and Recover is ErrMisconfigured (42501).
	if err := srv.Exec(ctx, db.Name, "CREATE ROLE carol LOGIN", "GRANT SELECT ON xa_participant TO carol", "REVOKE SELECT ON pg_catalog.pg_prepared_xacts FROM PUBLIC"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(db.DSN())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("carol")
	carol := openRMWith(t, Config{DSN: u.String(), SkipCheck: true})
	fs, err = carol.Check(ctx)
	if f := finding(fs, "pg_prepared_xacts"); !errors.Is(err, xa.ErrMisconfigured) || f.Severity != xa.SeverityFail || !strings.Contains(f.Fix, "carol") {
		t.Fatalf("Check without SELECT on pg_prepared_xacts = %+v, %v", f, err)
	}
	_, err = carol.Recover(ctx)
	wantKindCode(t, "Recover without SELECT on pg_prepared_xacts", err, xa.ErrMisconfigured, "42501")
}

func finding(fs []xa.Finding, name string) xa.Finding {
	for _, f := range fs {
		if f.Name == name {
			return f
		}
	}
	return xa.Finding{}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
