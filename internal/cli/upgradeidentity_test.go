package cli_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// Issue 13's scenario 1 after an upgrade. A log written before decision
// tables had identities holds a delegation to pg that names no table; the
// application's role owns a schema, so its decision table is
// <role>.xa_decisions, with no identity row (the earlier version made
// none). A transfer committed last in PostgreSQL (the decision row is in
// that table) with MariaDB's branch still prepared when the application
// stopped. The operator upgrades and, as the upgrade notes say, sets the
// participants up with xactl participant init, as the superuser, whose
// search_path finds no xa_decisions. Before: participant init created
// public.xa_decisions with an identity; the delegation names no table to
// compare it with, so recover claimed its abort marker in that empty table,
// logged the abort and rolled MariaDB back, with PostgreSQL committed.
// Now: participant init refuses to create a decision table while the log
// holds a delegation to that participant that names none (the decisions
// are in a table this role does not see), and recovery, finding no table,
// presumes nothing; configured with the schema-qualified name, the
// operator's init gives the application's table its identity and recovery
// commits MariaDB's branch.
func TestUpgradeParticipantInitFindsNoDecisionTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role := fmt.Sprintf("old_%d", nodeSeq.Add(1))
	if err := e.pg.Server.Exec(e.ctx, "", "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.pg.Server.Exec(context.Background(), e.pg.Name, "DROP OWNED BY "+role) //nolint:errcheck
		e.pg.Server.Exec(context.Background(), "", "DROP ROLE "+role)            //nolint:errcheck
	})
	ddl, err := xapg.DecisionTableDDL(role + ".xa_decisions")
	if err != nil {
		t.Fatal(err)
	}
	// The earlier version's state: no identity table, the application's
	// decision table in its schema without an identity row.
	if err := e.pg.Server.Exec(e.ctx, e.pg.Name, "CREATE SCHEMA "+role+" AUTHORIZATION "+role, "GRANT ALL ON kv TO "+role,
		"DROP TABLE public.xa_participant", ddl, "ALTER TABLE "+role+".xa_decisions OWNER TO "+role); err != nil {
		t.Fatal(err)
	}

	// The earlier version's transfer: MariaDB prepared, PostgreSQL
	// committed last with the decision row, the delegation in the log
	// naming no table.
	l, err := filelog.Open(e.logDir, filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LogDelegation(e.ctx, xa.Delegation{Participant: pgName, Logged: time.Now()}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	g, err := xa.NewGlobalID(e.node, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	x := e.xid(g, 0)
	mb, err := e.myRM.Start(e.ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mb.Session().(*xamysql.Conn).ExecContext(e.ctx, "INSERT INTO kv (k, v) VALUES (13, 13)"); err != nil {
		t.Fatal(err)
	}
	if v, err := mb.Prepare(e.ctx); v != xa.VotePrepared || err != nil {
		t.Fatalf("MariaDB prepare: %v, %v", v, err)
	}
	rec := xa.CommitRecord{ID: g, Logged: time.Now(), Branches: []xa.BranchRecord{{RM: myName, XID: x, Origin: mb.(xa.OriginReporter).Origin()}}}
	mb.Close()
	b, err := rec.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	app, err := pgx.Connect(e.ctx, withUser(t, e.pg.DSN(), role))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	err = pgx.BeginFunc(e.ctx, app, func(tx pgx.Tx) error {
		if _, err := tx.Exec(e.ctx, "INSERT INTO kv (k, v) VALUES (13, 13)"); err != nil {
			return err
		}
		_, err := tx.Exec(e.ctx, "INSERT INTO xa_decisions (gtrid, node, record) VALUES ($1, $2, $3)", g.String(), g.Node, b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(logGrace + 500*time.Millisecond)

	super := e.participantsConfig("upgrade.yaml", e.logDir, fmt.Sprintf(
		"  - name: %s\n    driver: mysql\n    dsn: %s\n  - name: %s\n    driver: postgres\n    dsn: %s\n    decision_table: xa_decisions\n",
		myName, strconv.Quote(e.my.DSN()), pgName, strconv.Quote(e.pg.DSN())))
	var runs []result
	for _, cmd := range [][]string{{"participant", "init"}, {"recover"}, {"recover"}} {
		runs = append(runs, e.runWith(super, cmd...))
	}
	if !e.myPrepared(x) {
		t.Fatalf("after participant init and recover as the superuser, MariaDB's branch of a transaction committed in PostgreSQL "+
			"is gone (MariaDB row %v, PostgreSQL row %v, abort records %v):\n%s\n%s", e.myRow(13), e.pgRow(13), logAborts(t, e.logDir), runs[0], runs[1])
	}
	runs[0].want(t, 1).stdoutHas(t, "not creating decision table xa_decisions", "schema-qualified")
	var created bool
	if err := e.pgConn().QueryRow(e.ctx, "SELECT to_regclass('public.xa_decisions') IS NOT NULL").Scan(&created); err != nil || created {
		t.Fatalf("participant init created public.xa_decisions (%v, %v) while the log delegated to a table it does not see", created, err)
	}
	if aborts := logAborts(t, e.logDir); len(aborts) != 0 {
		t.Fatalf("the log holds abort records %v for a transaction committed in PostgreSQL", aborts)
	}

	// The operator names the application's table: init gives it its
	// identity, recovery reads its decision and commits MariaDB's branch.
	right := e.participantsConfig("upgrade-right.yaml", e.logDir, fmt.Sprintf(
		"  - name: %s\n    driver: mysql\n    dsn: %s\n  - name: %s\n    driver: postgres\n    dsn: %s\n    decision_table: %s.xa_decisions\n",
		myName, strconv.Quote(e.my.DSN()), pgName, strconv.Quote(e.pg.DSN()), role))
	e.runWith(right, "participant", "init").want(t, 0)
	e.recoverUntilClean(right)
	e.wantRows(13, true, true)
}

// A participant's identity row is lost (a migration tool dropped the table
// it did not know, a restore left it out) while the decision log records
// its identity. Every message about a database without identity says to
// run xactl participant init, which makes a new identity; the log refuses
// it under the recorded name for ever (every transaction of the
// application aborts, recovery never acts there again), and init said
// only "this is another database" - of the very database the log
// recorded. It must say that it made the identity, and how to restore the
// recorded one; restored, the participant is the recorded one again.
func TestParticipantInitSaysHowToRestoreALostIdentity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id, err := e.pgRM.Identity()
	if err != nil {
		t.Fatal(err)
	}
	l, err := filelog.Open(e.logDir, filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.LogParticipant(e.ctx, xa.ParticipantRecord{Name: pgName, Identity: id, Logged: time.Now()}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := e.pg.Server.Exec(e.ctx, e.pg.Name, "DROP TABLE xa_participant"); err != nil {
		t.Fatal(err)
	}
	r := e.run("participant", "init", pgName).want(t, 3)
	if !strings.Contains(r.stdout, "this run made the identity") || !strings.Contains(r.stdout, "SET id = '"+id.ID+"'") {
		t.Fatalf("participant init made a new identity for a database whose recorded identity (%s) was lost, without saying how to restore it: %s", id.ID, r)
	}
	// The operator restores the id as told: the participant is back.
	if err := e.pg.Server.Exec(e.ctx, e.pg.Name, "UPDATE xa_participant SET id = '"+id.ID+"'"); err != nil {
		t.Fatal(err)
	}
	e.run("participant", "init", pgName).want(t, 0).stdoutHas(t, "decision log: recorded")
}
