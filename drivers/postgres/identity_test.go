package postgres

import (
	"errors"
	"strings"
	"testing"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// A database is a participant only once set up (Init): Open refuses one
// without the identity table, or with an empty one, and never creates it;
// a decision table is not created by Open either. A row that was made in
// another database (a dump restored here: its anchors differ) is refused
// as a copy until adopted; another database of the same server has
// another identity, and a session of the pool that reaches it is refused.
func TestParticipantIdentity(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	ctx := testCtx(t)
	_, err := Open(ctx, Config{Name: "pg", DSN: db.DSN()})
	var ie *xa.IdentityError
	if !errors.As(err, &ie) || !strings.Contains(ie.Fix, "xactl participant init") {
		t.Fatalf("Open of a database that was never set up: %v; want an *xa.IdentityError saying how to set it up", err)
	}
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)")
	var exists bool
	if err := raw(t, db).QueryRow(ctx, "SELECT to_regclass('xa_participant') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("Open without Init created the identity table (%v, %v)", exists, err)
	}
	_, err = Open(ctx, Config{Name: "pg", DSN: db.DSN(), DecisionTable: "xa_decisions", Init: false})
	if !errors.Is(err, xa.ErrIdentity) {
		t.Fatalf("Open with a missing decision table: %v; want ErrIdentity", err)
	}

	rm := openRMWith(t, Config{DSN: db.DSN(), DecisionTable: "xa_decisions"})
	id, err := rm.Identity()
	if err != nil || xa.ValidateStoreID(id.ID) != nil || !strings.Contains(id.Where, db.Name) {
		t.Fatalf("Identity = %+v, %v", id, err)
	}
	table, tid, err := rm.DecisionTableIdentity()
	if err != nil || table != "public.xa_decisions" || xa.ValidateStoreID(tid.ID) != nil || tid.ID == id.ID {
		t.Fatalf("DecisionTableIdentity = %q, %+v, %v", table, tid, err)
	}
	if decs, err := rm.Decisions(ctx); err != nil || len(decs) != 0 {
		t.Fatalf("Decisions = %v, %v: the identity row is no decision", decs, err)
	}
	again, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), DecisionTable: "xa_decisions"})
	if err != nil {
		t.Fatal(err)
	}
	if id2, _ := again.Identity(); !id2.Same(id) {
		t.Fatalf("reopened: identity %s, want %s", id2, id)
	}
	_, tid2, _ := again.DecisionTableIdentity()
	again.Close()
	if tid2 != tid {
		t.Fatalf("reopened: table identity %+v, want %+v", tid2, tid)
	}

	// A copy: the row's anchors name another database.
	mustExec(t, db, "UPDATE xa_participant SET database_oid = 1")
	if _, err := Open(ctx, Config{Name: "pg", DSN: db.DSN()}); !errors.As(err, &ie) || !strings.Contains(ie.Why, "copy") || !ie.Found.Same(id) {
		t.Fatalf("Open of a copy: %v; want an *xa.IdentityError saying it is a copy", err)
	}
	adopted, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), Adopt: true})
	if err != nil {
		t.Fatalf("Open with Adopt: %v", err)
	}
	if id3, _ := adopted.Identity(); !id3.Same(id) {
		t.Fatalf("adopted: identity %s, want %s (kept)", id3, id)
	}
	adopted.Close()

	// Another database of the server: another identity; a session that
	// reaches it is refused by the pool of the first.
	other := db.Server.CreateDB(t)
	orm := openRMWith(t, Config{DSN: other.DSN()})
	if oid, _ := orm.Identity(); oid.Same(id) {
		t.Fatal("two databases with one identity")
	}
	if err := rm.checkSession(ctx, rawDSN(t, other.DSN())); !errors.Is(err, xa.ErrIdentity) {
		t.Fatalf("a session on another database passed the pool's check: %v", err)
	}
	if err := rm.checkSession(ctx, raw(t, db)); err != nil {
		t.Fatalf("a session on the participant's own database: %v", err)
	}
}

// A copy carries the identity row but not its anchors: a dump of the
// participant's database restored into another database (a staging copy,
// CREATE DATABASE ... TEMPLATE) is refused by Open, and so must it be when
// a new session of a pool opened on the original reaches it (a DNS change,
// a connection pooler, a failover to the copy): the session check compares
// the anchors too, not the id alone.
func TestSessionReachingACopyIsRefused(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	ctx := testCtx(t)
	rm := openRMWith(t, Config{DSN: db.DSN()})
	id, err := rm.Identity()
	if err != nil {
		t.Fatal(err)
	}
	var sysid string
	var dboid uint32
	if err := raw(t, db).QueryRow(ctx, "SELECT system_identifier, database_oid FROM xa_participant").Scan(&sysid, &dboid); err != nil {
		t.Fatal(err)
	}
	// The copy: another database holding the original's row, as a
	// restored dump holds it.
	copied := db.Server.CreateDB(t)
	ddl, err := IdentityTableDDL(DefaultIdentityTable)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, copied, ddl)
	if _, err := raw(t, copied).Exec(ctx, "INSERT INTO xa_participant (id, system_identifier, database_oid) VALUES ($1, $2, $3)", id.ID, sysid, dboid); err != nil {
		t.Fatal(err)
	}
	var ie *xa.IdentityError
	if _, err := Open(ctx, Config{Name: "pg", DSN: copied.DSN()}); !errors.As(err, &ie) || !strings.Contains(ie.Why, "copy") {
		t.Fatalf("Open of the copy: %v; want it refused as a copy", err)
	}
	if err := rm.checkSession(ctx, rawDSN(t, copied.DSN())); !errors.Is(err, xa.ErrIdentity) {
		t.Fatalf("a new session that reached a copy of the participant's database passed the pool's check: %v", err)
	}
	if err := rm.checkSession(ctx, raw(t, db)); err != nil {
		t.Fatalf("a session on the participant's own database: %v", err)
	}
}

// Processes set up together (every replica opening with Init on a fresh
// database) race on CREATE TABLE IF NOT EXISTS; each of them must open,
// and all with one identity for the database and one for the table.
func TestInitRacesWithItself(t *testing.T) {
	t.Parallel()
	for round := 0; round < 10; round++ {
		db := dbtest.PostgresDB(t)
		ctx := testCtx(t)
		const n = 8 // openers at once, each round
		type opened struct {
			id, table xa.StoreIdentity
			err       error
		}
		out := make(chan opened, n)
		for i := 0; i < n; i++ {
			go func() {
				rm, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), DecisionTable: "xa_decisions", Init: true, MaxConns: 2})
				if err != nil {
					out <- opened{err: err}
					return
				}
				defer rm.Close()
				id, err := rm.Identity()
				_, tid, terr := rm.DecisionTableIdentity()
				out <- opened{id: id, table: tid, err: errors.Join(err, terr)}
			}()
		}
		var first opened
		for i := 0; i < n; i++ {
			o := <-out
			if o.err != nil {
				t.Fatalf("round %d: Open with Init beside %d others: %v", round, n-1, o.err)
			}
			if i == 0 {
				first = o
				continue
			}
			if !o.id.Same(first.id) || o.table.ID != first.table.ID {
				t.Fatalf("round %d: two identities for one database: %s / %s, tables %s / %s", round, o.id, first.id, o.table.ID, first.table.ID)
			}
		}
	}
}
