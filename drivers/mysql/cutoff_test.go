package mysql

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// When KILL QUERY cannot be delivered, a statement whose context ended is
// cut off by closing its connection. On a connection the RM dialled itself
// (a tcp or unix address: every DSN but a custom network's), that is done
// by closing the socket, since go-sql-driver is handed a context it cannot
// see end (so that it does not hand every statement's context to a
// goroutine and back); the wire tests' custom network takes the other way,
// through go-sql-driver's context (TestCommitOnePhaseOutcome,
// TestLostPrepareReplyOrigin). The cases, each on a plain address:
//
//   - XA COMMIT ONE PHASE held by the server: unknown, and the server
//     commits it once it stops holding commits;
//   - XA PREPARE held by the server: unknown (may be prepared);
//   - a statement of the branch (DO SLEEP): the branch is lost, rolled back.
//
// Each must return within seconds of its context's end, not when the server
// lets go.
func TestUndeliverableKillClosesTheSocket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := dbtest.NewMySQLServer(t)
	db := srv.CreateDB(t)
	raw := rawDB(t, db.DSN())
	rollbackListedAtEnd(t, raw)
	mustExec(t, raw, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	for i, c := range []string{"one-phase commit", "prepare", "statement"} {
		t.Run(c, func(t *testing.T) {
			rm := openRM(t, db.DSN())
			k := i + 1
			b, err := rm.Start(ctx, newXID(t))
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, conn(b), "INSERT INTO kv VALUES (?, ?)", k, k)
			s := b.(*branch).s
			if s == nil || s.dc.sock == nil {
				t.Fatal("the branch's connection has no socket the RM knows: the test would not take the socket's way")
			}
			id := s.id
			release := func() {}
			if i < 2 {
				release = holdCommits(t, raw)
			}
			undeliverableKill(rm)
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				switch i {
				case 0:
					done <- b.(xa.OnePhaseCommitter).CommitOnePhase(cctx)
				case 1:
					_, err := b.Prepare(cctx)
					done <- err
				default:
					_, err := conn(b).ExecContext(cctx, "DO SLEEP(60)")
					done <- err
				}
			}()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Error("the statement was not cut off 10 s after its context ended")
				release()
				if i == 2 {
					mustExec(t, raw, "KILL QUERY "+strconv.FormatUint(id, 10))
				}
				err = <-done
			}
			release()
			t.Logf("%s: %v", c, err)
			switch i {
			case 0, 1:
				wantKind(t, err, xa.ErrOutcomeUnknown)
			default:
				wantKind(t, err, xa.ErrRolledBack)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v; want it to match the context's error", err)
				}
			}
			if i == 0 {
				deadline := time.Now().Add(5 * time.Second)
				for {
					if _, ok := getV(t, raw, k); ok {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the one-phase commit the server held did not commit once it let go")
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}
