package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// A database is a participant only once set up (Init): Open refuses one
// without its identity and never creates it (with SkipCheck, the first
// statement is refused); another database has another identity; a
// read-only server (a replica) is refused.
func TestParticipantIdentity(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := dbtest.NewMySQLServer(t)
	db := srv.CreateDB(t)
	raw := rawDB(t, db.DSN())
	_, err := Open(ctx, Config{Name: "maria", DSN: db.DSN()})
	var ie *xa.IdentityError
	if !errors.As(err, &ie) || !strings.Contains(ie.Fix, "xactl participant init") {
		t.Fatalf("Open of a database that was never set up: %v; want an *xa.IdentityError saying how to set it up", err)
	}
	lazy, err := Open(ctx, Config{Name: "maria", DSN: db.DSN(), SkipCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lazy.Start(ctx, newXID(t)); !errors.Is(err, xa.ErrIdentity) {
		t.Fatalf("a branch on a database without identity (SkipCheck): %v; want ErrIdentity", err)
	}
	lazy.Close()
	var n int
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'xa_participant'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("Open without Init created the identity table (%d, %v)", n, err)
	}

	rm := openRM(t, db.DSN())
	id, err := rm.Identity()
	if err != nil || xa.ValidateStoreID(id.ID) != nil || !strings.Contains(id.Where, db.Name) {
		t.Fatalf("Identity = %+v, %v", id, err)
	}
	if id2, _ := openRM(t, db.DSN()).Identity(); !id2.Same(id) {
		t.Fatalf("reopened: %s, want %s", id2, id)
	}
	other := srv.CreateDB(t)
	if oid, _ := openRM(t, other.DSN()).Identity(); oid.Same(id) {
		t.Fatal("two databases with one identity")
	}

	mustExec(t, raw, "SET GLOBAL read_only = ON")
	t.Cleanup(func() { raw.Exec("SET GLOBAL read_only = OFF") }) //nolint:errcheck
	_, err = Open(ctx, Config{Name: "maria", DSN: db.DSN()})
	if !errors.As(err, &ie) || !strings.Contains(ie.Why, "read-only") {
		t.Fatalf("Open of a read-only server: %v; want an *xa.IdentityError saying it is read-only", err)
	}
}

// With SkipCheck nobody has read the identity when the application's first
// statements arrive, all at once: the sessions opened together each ask
// without the identity column, and whichever checks after another one
// stored the identity must not look for it in its row (a panic: index out
// of range, which kills the application).
func TestSessionsOpenedTogetherBeforeTheIdentityIsKnown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := dbtest.MySQLDB(t)
	openRM(t, db.DSN()) // sets the database up
	for round := range 5 {
		rm, err := Open(ctx, Config{Name: "maria", DSN: db.DSN(), SkipCheck: true, MaxConns: 32})
		if err != nil {
			t.Fatal(err)
		}
		const n = 24
		errs := make(chan error, n)
		var start sync.WaitGroup
		start.Add(1)
		for range n {
			go func() {
				defer func() {
					if p := recover(); p != nil {
						errs <- fmt.Errorf("panic: %v", p)
					}
				}()
				start.Wait()
				c, err := rm.db.Conn(ctx)
				if err == nil {
					err = c.PingContext(ctx)
					c.Close()
				}
				errs <- err
			}()
		}
		start.Done()
		for range n {
			if err := <-errs; err != nil {
				rm.Close()
				t.Fatalf("round %d: a session opened while others were: %v", round, err)
			}
		}
		if _, err := rm.Identity(); err != nil {
			t.Fatal(err)
		}
		rm.Close()
	}
}
