package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// A branch of a participant with a decision table commits last: its work
// and the decision row become durable in one local commit, in one round
// trip; the RM lists, finds and forgets the decision.
func TestCommitLast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.PostgresDB(t)
	if err := db.Server.Exec(ctx, db.Name, "CREATE TABLE kv (k INT PRIMARY KEY, v INT)"); err != nil {
		t.Fatal(err)
	}
	rm, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), DecisionTable: "ops_decisions", Init: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	plain, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), Init: true})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()

	g, _ := xa.NewGlobalID("last", time.Now())
	rec := xa.CommitRecord{ID: g, Logged: time.Now(), Branches: []xa.BranchRecord{{RM: "maria", XID: g.Branch(0), Origin: xa.Origin{Session: 7}}}}
	b, err := rm.Start(ctx, g.Branch(1))
	if err != nil {
		t.Fatal(err)
	}
	lr := b.(xa.LastResource)
	if !lr.CanCommitLast() {
		t.Fatal("a participant with a decision table cannot commit last")
	}
	if pb, _ := plain.Start(ctx, g.Branch(2)); pb.(xa.LastResource).CanCommitLast() {
		t.Fatal("a participant without a decision table says it can commit last")
	}
	if _, err := b.Session().(*Conn).Exec(ctx, "INSERT INTO kv VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	if err := lr.CommitLast(ctx, rec); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, db.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM kv").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows = %d, %v: the work did not commit", n, err)
	}
	decs, err := rm.Decisions(ctx)
	if err != nil || len(decs) != 1 || decs[0].ID != g || decs[0].Branches[0].Origin.Session != 7 {
		t.Fatalf("Decisions = %+v, %v", decs, err)
	}
	if _, ok, err := rm.Decision(ctx, g); !ok || err != nil {
		t.Fatalf("Decision = %v, %v", ok, err)
	}
	if err := rm.ForgetDecisions(ctx, []xa.GlobalID{g}); err != nil {
		t.Fatal(err)
	}
	if decs, _ := rm.Decisions(ctx); len(decs) != 0 {
		t.Fatalf("decisions after forget: %v", decs)
	}

	// A branch whose transaction failed: neither its work nor the
	// decision commits.
	g2, _ := xa.NewGlobalID("last", time.Now())
	b2, _ := rm.Start(ctx, g2.Branch(1))
	s2 := b2.Session().(*Conn)
	if _, err := s2.Exec(ctx, "INSERT INTO kv VALUES (2, 2)"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Exec(ctx, "INSERT INTO kv VALUES (2, 2)"); err == nil {
		t.Fatal("duplicate key accepted")
	}
	err = b2.(xa.LastResource).CommitLast(ctx, xa.CommitRecord{ID: g2, Logged: time.Now()})
	if !errors.Is(err, xa.ErrRolledBack) {
		t.Fatalf("CommitLast of a failed transaction = %v; want ErrRolledBack", err)
	}
	if _, ok, _ := rm.Decision(ctx, g2); ok {
		t.Fatal("the decision of a rolled back transaction was stored")
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM kv WHERE k = 2").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows = %d, %v: the failed transaction committed", n, err)
	}
}

// A decision table name that is not one is refused by Open, with the
// reason.
func TestDecisionTableName(t *testing.T) {
	for _, bad := range []string{"a.b.c", ".x", "x."} {
		if _, err := DecisionTableDDL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	ddl, err := DecisionTableDDL(`odd"name`)
	if err != nil || ddl == "" {
		t.Fatalf("%q: %v", ddl, err)
	}
}

// A lost reply to the last resource's commit is "outcome unknown", and the
// stored decision then says what happened.
func TestCommitLastLostReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.PostgresDB(t)
	if err := db.Server.Exec(ctx, db.Name, "CREATE TABLE kv (k INT PRIMARY KEY, v INT)"); err != nil {
		t.Fatal(err)
	}
	p, dsn := newProxy(t, db.DSN())
	rm, err := Open(ctx, Config{Name: "pg", DSN: dsn, DecisionTable: "xa_decisions", Init: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	direct, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), DecisionTable: "xa_decisions", SkipCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	g, _ := xa.NewGlobalID("lost", time.Now())
	b, _ := rm.Start(ctx, g.Branch(1))
	if _, err := b.Session().(*Conn).Exec(ctx, "INSERT INTO kv VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	lost := p.loseReplyTo("xa_decisions")
	err = b.(xa.LastResource).CommitLast(ctx, xa.CommitRecord{ID: g, Logged: time.Now()})
	<-lost
	if !xa.OutcomeUnknown(err) {
		t.Fatalf("CommitLast with a lost reply = %v; want outcome unknown", err)
	}
	if _, ok, err := direct.Decision(ctx, g); !ok || err != nil {
		t.Fatalf("the decision is not stored (%v, %v), yet the server committed", ok, err)
	}
}
