package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// openRMWith opens a resource manager with cfg (Name and DSN filled in if
// empty), closed when t ends.
func openRMWith(t testing.TB, cfg Config) *RM {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "pg"
	}
	cfg.Init = true
	rm, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(rm.Close)
	return rm
}

// idleInTransaction counts sessions of db left inside a transaction,
// giving sessions whose client went away two seconds to end.
func idleInTransaction(t testing.TB, db *dbtest.DB) int {
	t.Helper()
	c := raw(t, db)
	deadline := time.Now().Add(2 * time.Second)
	for {
		var n int
		err := c.QueryRow(testCtx(t),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state LIKE 'idle in transaction%'", db.Name).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A branch takes a pooled connection at its first statement and gives it
// back at PREPARE; phase 2 runs on any pooled connection; an active branch
// that is closed loses its session (never pooled inside a transaction).
func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)

	x := newXID(t)
	b, c := start(t, rm, ctx, x)
	if n := rm.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("Start holds %d connections, want 0 (no I/O before the first statement)", n)
	}
	if !b.Idle() {
		t.Fatal("fresh branch not idle")
	}
	exec(t, c, "INSERT INTO kv VALUES (1, 1)")
	if b.Idle() {
		t.Fatal("branch idle after a statement")
	}
	if n := rm.pool.Stat().AcquiredConns(); n != 1 {
		t.Fatalf("active branch holds %d connections, want 1", n)
	}
	total := rm.pool.Stat().TotalConns()
	prepare(t, b, xa.VotePrepared)
	if st := rm.pool.Stat(); st.AcquiredConns() != 0 || st.TotalConns() != total {
		t.Fatalf("after PREPARE: %d acquired, %d total (was %d); want the session back in the pool", st.AcquiredConns(), st.TotalConns(), total)
	}
	if _, err := c.Exec(ctx, "SELECT 1"); !errors.Is(err, xa.ErrBranchDone) {
		t.Fatalf("statement after PREPARE = %v, want ErrBranchDone", err)
	}
	// The pool's session now runs another branch while phase 2 of the
	// first runs on whatever session the pool gives it.
	b2, c2 := start(t, rm, ctx, newXID(t))
	exec(t, c2, "INSERT INTO kv VALUES (2, 2)")
	if err := b.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	wantValue(t, db, 1, 1)
	if err := b.Commit(ctx); err != nil {
		t.Fatalf("second Commit of a committed branch: %v", err)
	}
	if err := b.Rollback(ctx); !errors.Is(err, xa.ErrInvalidState) {
		t.Fatalf("Rollback of a committed branch = %v, want ErrInvalidState", err)
	}

	// Closing an active branch closes its session: the transaction is
	// rolled back by the server, nothing is pooled inside a transaction.
	total = rm.pool.Stat().TotalConns()
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	// pgxpool destroys connections in the background.
	for deadline := time.Now().Add(2 * time.Second); rm.pool.Stat().TotalConns() != total-1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := rm.pool.Stat().TotalConns(); got != total-1 {
		t.Fatalf("Close of an active branch: %d connections, want %d (closed, not pooled)", got, total-1)
	}
	if n := idleInTransaction(t, db); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}
	wantAbsent(t, db, 2)

	// Commit of an active branch is refused.
	b3, c3 := start(t, rm, ctx, newXID(t))
	exec(t, c3, "INSERT INTO kv VALUES (3, 3)")
	if err := b3.Commit(ctx); !errors.Is(err, xa.ErrInvalidState) {
		t.Fatalf("Commit of an active branch = %v, want ErrInvalidState", err)
	}
	if err := b3.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b3.Rollback(ctx); err != nil {
		t.Fatalf("second Rollback: %v", err)
	}
	wantAbsent(t, db, 3)
	if n := idleInTransaction(t, db); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}
}

// Round trips, counted at the wire: BEGIN travels with the first
// statement, PREPARE is one round trip for a branch that wrote, an idle
// branch costs none, a read-only branch costs the xid question and its
// COMMIT.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)",
		"CREATE FUNCTION put(k int, v int) RETURNS int LANGUAGE sql AS 'INSERT INTO kv VALUES (k, v) RETURNING v'")
	p, dsn := newProxy(t, db.DSN())
	ctx := testCtx(t)

	for _, mode := range []string{"exec", "cache_statement"} {
		t.Run(mode, func(t *testing.T) {
			rm := openRMWith(t, Config{DSN: dsn + "&default_query_exec_mode=" + mode, MaxConns: 1})
			base := 100
			if mode == "cache_statement" {
				base = 200
			}
			rts := func(f func()) int64 {
				t.Helper()
				before := p.roundTrips()
				f()
				return p.roundTrips() - before
			}
			want := func(what string, got, want int64) {
				t.Helper()
				if got != want {
					t.Errorf("%s: %d round trips, want %d", what, got, want)
				}
			}
			insert := "INSERT INTO kv VALUES ($1, $2)"
			if mode == "cache_statement" {
				// Warm the statement cache of the pool's only session:
				// a statement's first use costs a describe round trip.
				b, c := start(t, rm, ctx, newXID(t))
				exec(t, c, insert, base, 0)
				exec(t, c, "SELECT v FROM kv WHERE k = $1", base)
				b.Rollback(ctx) //nolint:errcheck
			}

			var (
				b *branch
				c *Conn
			)
			want("Start", rts(func() { b, c = start(t, rm, ctx, newXID(t)) }), 0)
			want("first Exec without arguments (with BEGIN)", rts(func() { exec(t, c, "UPDATE kv SET v = v WHERE k = 0") }), 1)
			want("Exec with arguments", rts(func() { exec(t, c, insert, base+1, 1) }), 1)
			want("Prepare of a writer", rts(func() { prepare(t, b, xa.VotePrepared) }), 1)
			want("Commit", rts(func() {
				if err := b.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}), 1)

			want("first Exec with arguments (with BEGIN)", rts(func() {
				b, c = start(t, rm, ctx, newXID(t))
				exec(t, c, insert, base+2, 2)
			}), 1)
			want("CommitOnePhase", rts(func() {
				if err := b.CommitOnePhase(ctx); err != nil {
					t.Fatal(err)
				}
			}), 1)

			want("first QueryRow (with BEGIN)", rts(func() {
				b, c = start(t, rm, ctx, newXID(t))
				var v int
				if err := c.QueryRow(ctx, "SELECT v FROM kv WHERE k = $1", base+1).Scan(&v); err != nil || v != 1 {
					t.Fatalf("QueryRow = %d, %v", v, err)
				}
			}), 1)
			want("Prepare of a reader (xid question + COMMIT)", rts(func() { prepare(t, b, xa.VoteReadOnly) }), 2)

			want("Prepare of an idle branch", rts(func() {
				b, _ = start(t, rm, ctx, newXID(t))
				if !b.Idle() {
					t.Fatal("not idle")
				}
				prepare(t, b, xa.VoteReadOnly)
			}), 0)

			// A write the command tag does not show: the xid question
			// finds it, and the branch is prepared.
			b, c = start(t, rm, ctx, newXID(t))
			var v int
			if err := c.QueryRow(ctx, "SELECT put($1, $2)", base+3, 3).Scan(&v); err != nil {
				t.Fatal(err)
			}
			want("Prepare of a hidden writer (xid question + PREPARE)", rts(func() { prepare(t, b, xa.VotePrepared) }), 2)
			if err := b.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			wantValue(t, db, base+3, 3)
		})
	}
}

// A branch that only read, or whose writes touched no row, votes
// read-only and leaves no prepared transaction; one that locked rows is
// prepared.
func TestReadOnlyVotes(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	mustExec(t, db, "INSERT INTO kv VALUES (1, 1)")
	for _, tc := range []struct {
		stmt string
		vote xa.Vote
	}{
		{"SELECT v FROM kv", xa.VoteReadOnly},
		{"UPDATE kv SET v = 2 WHERE k = -1", xa.VoteReadOnly},
		{"DELETE FROM kv WHERE k = -1", xa.VoteReadOnly},
		{"SELECT v FROM kv WHERE k = 1 FOR UPDATE", xa.VotePrepared}, // row locks assign an xid
		{"UPDATE kv SET v = 1 WHERE k = 1", xa.VotePrepared},
	} {
		x := newXID(t)
		b, c := start(t, rm, ctx, x)
		exec(t, c, tc.stmt)
		prepare(t, b, tc.vote)
		if got := listed(t, db, x.String()); got != (tc.vote == xa.VotePrepared) {
			t.Errorf("%s: vote %v, listed %v", tc.stmt, tc.vote, got)
		}
		if tc.vote == xa.VotePrepared {
			if err := b.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := idleInTransaction(t, db); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}
}

// Transaction control is refused before anything is sent, through every
// entry point; several statements in one string cannot smuggle it past.
func TestTransactionControlRefused(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO kv VALUES (1, 1)")
	p, dsn := newProxy(t, db.DSN())
	ctx := testCtx(t)
	// simple_protocol in the DSN must not reopen the door.
	rm := openRMWith(t, Config{DSN: dsn + "&default_query_exec_mode=simple_protocol"})

	refused := []string{"COMMIT", "END", "ROLLBACK", "ABORT", "BEGIN", "START TRANSACTION", "PREPARE TRANSACTION 'x'",
		"COMMIT PREPARED 'x'", "ROLLBACK PREPARED 'x'", "  -- hidden\n /* really /* hidden */ */ ;commit", "rollback and chain"}
	b, c := start(t, rm, ctx, newXID(t))
	exec(t, c, "UPDATE kv SET v = 2 WHERE k = 1")
	entry := map[string]func(string) error{
		"Exec":     func(q string) error { _, err := c.Exec(ctx, q); return err },
		"Exec+arg": func(q string) error { _, err := c.Exec(ctx, q, 1); return err },
		"Query": func(q string) error {
			rows, err := c.Query(ctx, q)
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			return err
		},
		"QueryRow": func(q string) error { return c.QueryRow(ctx, q).Scan() },
		"SendBatch": func(q string) error {
			var bt pgx.Batch
			bt.Queue("SELECT 1")
			bt.Queue(q)
			return c.SendBatch(ctx, &bt).Close()
		},
		"NamedArgs": func(q string) error { _, err := c.Exec(ctx, q, pgx.NamedArgs{"a": 1}); return err },
	}
	for name, f := range entry {
		for _, q := range refused {
			before := p.roundTrips()
			err := f(q)
			if !errors.Is(err, xa.ErrTransactionControl) {
				t.Errorf("%s(%q) = %v, want ErrTransactionControl", name, q, err)
			}
			if n := p.roundTrips() - before; n != 0 {
				t.Errorf("%s(%q) sent %d round trips before refusing", name, q, n)
			}
		}
	}
	// ROLLBACK TO SAVEPOINT is the application's.
	exec(t, c, "SAVEPOINT s")
	if _, err := c.Exec(ctx, "UPDATE kv SET v = 1/0 WHERE k = 1"); err == nil {
		t.Fatal("division by zero succeeded")
	}
	exec(t, c, "ROLLBACK TO SAVEPOINT s")
	exec(t, c, "RELEASE SAVEPOINT s")
	exec(t, c, "UPDATE kv SET v = v + 1 WHERE k = 1")
	prepare(t, b, xa.VotePrepared)
	wantValue(t, db, 1, 1) // nothing committed behind the transaction manager's back
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 1, 3)

	// Smuggling a second statement: the server refuses the whole string,
	// the transaction fails, the branch votes abort, nothing commits.
	smuggle := map[string]func() error{
		"Exec":     func() error { _, err := c.Exec(ctx, "UPDATE kv SET v = 10 WHERE k = 1; COMMIT"); return err },
		"Exec+arg": func() error { _, err := c.Exec(ctx, "UPDATE kv SET v = $1 WHERE k = 1; COMMIT", 10); return err },
		"Exec+simple option": func() error {
			_, err := c.Exec(ctx, "UPDATE kv SET v = $1 WHERE k = 1; COMMIT", pgx.QueryExecModeSimpleProtocol, 10)
			return err
		},
		"Query": func() error {
			rows, _ := c.Query(ctx, "UPDATE kv SET v = 10 WHERE k = 1 RETURNING v; COMMIT")
			rows.Close()
			return rows.Err()
		},
		"SendBatch": func() error {
			var bt pgx.Batch
			bt.Queue("UPDATE kv SET v = 10 WHERE k = 1; COMMIT")
			return c.SendBatch(ctx, &bt).Close()
		},
	}
	for name, f := range smuggle {
		x := newXID(t)
		b, c = start(t, rm, ctx, x)
		exec(t, c, "INSERT INTO kv VALUES (2, 2)") // begun, then the attempt
		err := f()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42601" {
			t.Errorf("%s: smuggled COMMIT answered %v, want 42601", name, err)
		}
		v, err := b.Prepare(ctx)
		if v != xa.VoteAbort || !errors.Is(err, xa.ErrRolledBack) {
			t.Errorf("%s: Prepare = %v, %v; want abort, ErrRolledBack", name, v, err)
		}
		wantValue(t, db, 1, 3)
		wantAbsent(t, db, 2)
		if listed(t, db, x.String()) {
			t.Errorf("%s: branch prepared", name)
		}
	}
}

// Backstop: if the transaction ever ends behind the transaction manager's
// back (here COMMIT sent past the statement check), the session's
// transaction status shows it and the branch votes abort.
func TestTxStatusBackstop(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	x := newXID(t)
	b, c := start(t, rm, ctx, x)
	exec(t, c, "INSERT INTO kv VALUES (1, 1)")
	s, err := b.enter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.conn.PgConn().Exec(s.ctx, "COMMIT").ReadAll() // unchecked
	if err := s.exit(err, nil); !errors.Is(err, xa.ErrTransactionControl) {
		t.Fatalf("statement that ended the transaction = %v, want ErrTransactionControl", err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO kv VALUES (2, 2)"); !errors.Is(err, xa.ErrTransactionControl) {
		t.Fatalf("next statement = %v, want ErrTransactionControl", err)
	}
	v, err := b.Prepare(ctx)
	if v != xa.VoteAbort || !errors.Is(err, xa.ErrTransactionControl) {
		t.Fatalf("Prepare = %v, %v; want abort, ErrTransactionControl", v, err)
	}
	wantAbsent(t, db, 2)
	if listed(t, db, x.String()) {
		t.Fatal("broken branch prepared")
	}
}

// The session API: Query, QueryRow, SendBatch and CopyFrom work as the
// first statement and later; Rows.Conn is hidden; one statement at a time.
func TestSessionAPI(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	mustExec(t, db, "INSERT INTO kv VALUES (1, 10), (2, 20)")

	// Query first.
	b, c := start(t, rm, ctx, newXID(t))
	rows, err := c.Query(ctx, "SELECT k, v FROM kv ORDER BY k")
	if err != nil {
		t.Fatal(err)
	}
	if rows.Conn() != nil {
		t.Fatal("Rows.Conn exposes the branch's connection")
	}
	sum := 0
	for rows.Next() {
		var k, v int
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	if rows.Err() != nil || sum != 30 {
		t.Fatalf("sum %d, %v", sum, rows.Err())
	}
	if err := c.QueryRow(ctx, "SELECT v FROM kv WHERE k = 99").Scan(&sum); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("QueryRow of no row = %v, want pgx.ErrNoRows", err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO kv VALUES (@k, @v)", pgx.NamedArgs{"k": 3, "v": 30}); err != nil {
		t.Fatal(err)
	}
	// One statement at a time.
	open, err := c.Query(ctx, "SELECT k FROM kv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("statement accepted while Rows are open")
	}
	open.Close()
	rows, _ = c.Query(ctx, "INSERT INTO kv VALUES (4, 40) RETURNING k")
	for rows.Next() {
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if !b.wrote {
		t.Fatal("INSERT ... RETURNING through Query not counted as a write")
	}
	prepare(t, b, xa.VotePrepared)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 3, 30)
	wantValue(t, db, 4, 40)

	// SendBatch first, with callbacks.
	b, c = start(t, rm, ctx, newXID(t))
	var bt pgx.Batch
	bt.Queue("INSERT INTO kv VALUES ($1, $2)", 5, 50)
	var got int
	bt.Queue("SELECT v FROM kv WHERE k = $1", 5).QueryRow(func(r pgx.Row) error { return r.Scan(&got) })
	bt.Queue("SELECT count(*) FROM kv").Query(func(rows pgx.Rows) error {
		if rows.Conn() != nil {
			return errors.New("Rows.Conn exposed in a batch callback")
		}
		for rows.Next() {
		}
		return rows.Err()
	})
	br := c.SendBatch(ctx, &bt)
	if tag, err := br.Exec(); err != nil || !tag.Insert() {
		t.Fatalf("batch insert: %v %v", tag, err)
	}
	if err := br.Close(); err != nil || got != 50 {
		t.Fatalf("batch: %d, %v", got, err)
	}
	if err := br.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if br.Tx() != nil {
		t.Fatal("batch exposes a Tx")
	}
	prepare(t, b, xa.VotePrepared)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 5, 50)

	// CopyFrom first: counted as a write.
	b, c = start(t, rm, ctx, newXID(t))
	n, err := c.CopyFrom(ctx, pgx.Identifier{"kv"}, []string{"k", "v"}, pgx.CopyFromRows([][]any{{6, 60}, {7, 70}}))
	if err != nil || n != 2 {
		t.Fatalf("CopyFrom = %d, %v", n, err)
	}
	if !b.wrote {
		t.Fatal("CopyFrom not counted as a write")
	}
	prepare(t, b, xa.VotePrepared)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 7, 70)

	// Rows left open at Prepare: the branch is rolled back.
	b, c = start(t, rm, ctx, newXID(t))
	exec(t, c, "INSERT INTO kv VALUES (8, 80)")
	open, _ = c.Query(ctx, "SELECT k FROM generate_series(1, 100000) k")
	v, err := b.Prepare(ctx)
	if v != xa.VoteAbort || !errors.Is(err, xa.ErrRolledBack) {
		t.Fatalf("Prepare with open Rows = %v, %v; want abort, ErrRolledBack", v, err)
	}
	open.Close()
	wantAbsent(t, db, 8)
	if n := idleInTransaction(t, db); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}
}

// A statement blocked on a row lock is cancelled on the server when its
// context, or the branch's, ends or when the branch is rolled back: it
// returns within a second, the session survives, the branch rolls back,
// the lock holder is unaffected and the pool stays healthy.
func TestCancelBlockedStatement(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	mustExec(t, db, "INSERT INTO kv VALUES (1, 0)")

	// "Start's context": the statement runs under the context the branch
	// was started with (as xa.Tx's callers do), which bounds it through
	// the branch's life alone (see enter).
	hows := []string{"statement context", "branch context", "Rollback", "Start's context", "Rollback, Start's context"}
	for _, how := range hows {
		t.Run(how, func(t *testing.T) {
			holder := raw(t, db)
			if _, err := holder.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := holder.Exec(ctx, "UPDATE kv SET v = v - 1 WHERE k = 1"); err != nil {
				t.Fatal(err)
			}
			bctx, bcancel := context.WithCancel(ctx)
			defer bcancel()
			b, c := start(t, rm, bctx, newXID(t))
			exec(t, c, "INSERT INTO kv VALUES (2, 2)")
			pid := b.conn.Conn().PgConn().PID()
			newConns := rm.pool.Stat().NewConnsCount()

			sctx, scancel := context.WithCancel(ctx)
			defer scancel()
			if strings.HasSuffix(how, "Start's context") {
				sctx = bctx
			}
			const after = 300 * time.Millisecond
			rolledBack := make(chan error, 1)
			switch how {
			case "statement context":
				time.AfterFunc(after, scancel)
			case "branch context", "Start's context":
				time.AfterFunc(after, bcancel)
			case "Rollback", "Rollback, Start's context":
				time.AfterFunc(after, func() { rolledBack <- b.Rollback(ctx) })
			}
			began := time.Now()
			_, err := c.Exec(sctx, "UPDATE kv SET v = 5 WHERE k = 1")
			took := time.Since(began) - after
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "57014" {
				t.Fatalf("blocked statement = %v, want 57014 query_canceled", err)
			}
			if took > time.Second {
				t.Fatalf("cancelled statement returned %v after the cancel", took)
			}
			if strings.HasPrefix(how, "Rollback") {
				if err := <-rolledBack; err != nil {
					t.Fatalf("Rollback: %v", err)
				}
			} else {
				if b.conn.Conn().PgConn().IsClosed() || b.conn.Conn().PgConn().PID() != pid {
					t.Fatal("session lost to the cancel")
				}
				if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
					t.Fatal("statement ran in a transaction failed by the cancel")
				}
				v, err := b.Prepare(ctx)
				if v != xa.VoteAbort || !errors.Is(err, xa.ErrRolledBack) {
					t.Fatalf("Prepare = %v, %v; want abort, ErrRolledBack", v, err)
				}
				if err := b.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
				t.Fatalf("lock holder: %v", err)
			}
			wantAbsent(t, db, 2)
			if n := rm.pool.Stat().NewConnsCount(); n != newConns {
				t.Errorf("%d new connections: the session was not kept", n-newConns)
			}
			if n := idleInTransaction(t, db); n != 0 {
				t.Fatalf("%d sessions idle in transaction", n)
			}
			b2, c2 := start(t, rm, ctx, newXID(t))
			exec(t, c2, "UPDATE kv SET v = v + 10 WHERE k = 1")
			prepare(t, b2, xa.VotePrepared)
			if err := b2.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	wantValue(t, db, 1, 9*len(hows)) // each case's holder's -1 and branch's +10
}

// A session killed under a branch breaks it: the branch votes abort
// (rolled back) and the pool recovers.
func TestSessionLost(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	x := newXID(t)
	b, c := start(t, rm, ctx, x)
	exec(t, c, "INSERT INTO kv VALUES (1, 1)")
	pid := b.conn.Conn().PgConn().PID()
	if _, err := raw(t, db).Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO kv VALUES (2, 2)"); err == nil {
		t.Fatal("statement on a terminated session succeeded")
	}
	_, err := c.Exec(ctx, "SELECT 1")
	if !errors.Is(err, xa.ErrRolledBack) {
		t.Fatalf("statement after the session was lost = %v, want ErrRolledBack", err)
	}
	v, err := b.Prepare(ctx)
	if v != xa.VoteAbort || !errors.Is(err, xa.ErrRolledBack) || xa.OutcomeUnknown(err) {
		t.Fatalf("Prepare = %v, %v; want abort, ErrRolledBack", v, err)
	}
	wantAbsent(t, db, 1)
	b2, c2 := start(t, rm, ctx, newXID(t))
	exec(t, c2, "INSERT INTO kv VALUES (3, 3)")
	prepare(t, b2, xa.VotePrepared)
	if err := b2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 3, 3)
}

// RM.Close does not wait for branches the application left active: their
// sessions close (the server rolls them back), a blocked statement
// returns; prepared branches stay prepared.
func TestRMCloseWithActiveBranches(t *testing.T) {
	t.Parallel()
	db, _ := setup(t)
	ctx := testCtx(t)
	rm, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), Init: true})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "INSERT INTO kv VALUES (1, 0)")
	holder := raw(t, db)
	if _, err := holder.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "UPDATE kv SET v = 1 WHERE k = 1"); err != nil {
		t.Fatal(err)
	}
	prepared := newXID(t)
	bp, sp := start(t, rm, ctx, prepared)
	exec(t, sp, "INSERT INTO kv VALUES (2, 2)")
	prepare(t, bp, xa.VotePrepared)
	start(t, rm, ctx, newXID(t)) // idle
	_, active := start(t, rm, ctx, newXID(t))
	exec(t, active, "INSERT INTO kv VALUES (3, 3)")
	_, blocked := start(t, rm, ctx, newXID(t))
	exec(t, blocked, "INSERT INTO kv VALUES (4, 4)")
	blockedErr := make(chan error, 1)
	go func() {
		_, err := blocked.Exec(ctx, "UPDATE kv SET v = 5 WHERE k = 1")
		blockedErr <- err
	}()
	time.Sleep(200 * time.Millisecond)

	closed := make(chan struct{})
	go func() { rm.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("RM.Close blocked by active branches")
	}
	if err := <-blockedErr; err == nil {
		t.Fatal("blocked statement succeeded")
	}
	if _, err := active.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("statement on a closed resource manager's branch succeeded")
	}
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	wantValue(t, db, 1, 1)
	for _, k := range []int{2, 3, 4} {
		wantAbsent(t, db, k)
	}
	if n := idleInTransaction(t, db); n != 0 {
		t.Fatalf("%d sessions idle in transaction", n)
	}
	rm2 := openRM(t, db.DSN())
	if err := rm2.Commit(ctx, prepared, xa.Origin{}); err != nil {
		t.Fatalf("prepared branch lost with RM.Close: %v", err)
	}
	wantValue(t, db, 2, 2)
}
