package cli_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/internal/testrig/faultproxy"
	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

// The application of these tests: a transaction manager on a decision log
// of its own (timeout 2 s, grace 3 s), whose participants may sit behind a
// fault proxy, stopped (its log closed, its sessions gone) once it has
// run one transfer.
const (
	appTimeout = 2 * time.Second
	appGrace   = 3 * time.Second
)

// appTransfer runs one transfer of row k over my and pg with a manager on
// a new log in dir, as an application would, and stops the application.
// It returns the outcome the application was told.
func (e *env) appTransfer(dir string, my *xamysql.RM, pg *xapg.RM, k int) (xa.Result, error) {
	e.t.Helper()
	e.createLog(dir, e.node, appTimeout, appGrace)
	l, err := filelog.Open(dir, filelog.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer l.Close()
	mgr, err := xa.NewManager(xa.Config{Node: e.node, Log: l, Phase2Attempts: 1, Phase2Timeout: 500 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	return mgr.Run(e.ctx, func(ctx context.Context, tx *xa.Tx) error {
		m, err := my.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := m.ExecContext(ctx, "INSERT INTO kv (k, v) VALUES (?, ?)", k, k); err != nil {
			return err
		}
		p, err := pg.Enlist(ctx, tx)
		if err != nil {
			return err
		}
		_, err = p.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", k, k)
		return err
	})
}

// proxied returns a fault proxy in front of db's server and db's DSN
// through it.
func proxied(t *testing.T, db *dbtest.DB) (*faultproxy.Proxy, string) {
	t.Helper()
	p, err := faultproxy.Start(fmt.Sprintf("%s:%d", db.Server.Host, db.Server.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if db.Server.Kind == dbtest.MySQL {
		c, err := gomysql.ParseDSN(db.DSN())
		if err != nil {
			t.Fatal(err)
		}
		c.Addr = p.Addr()
		return p, c.FormatDSN()
	}
	u, err := url.Parse(db.DSN())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	return p, u.String()
}

// withUser returns the PostgreSQL DSN dsn with another user.
func withUser(t *testing.T, dsn, user string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	return u.String()
}

// participantsConfig is a configuration for the node with the log in dir
// and the given participants section.
func (e *env) participantsConfig(name, dir, participants string) string {
	e.t.Helper()
	return e.writeConfig(name, fmt.Sprintf("node: %s\nlog:\n  dir: %s\nparticipants:\n%s", e.node, strconv.Quote(dir), participants))
}

// Issue 13, scenario 1: a decision table has no identity, and recovery
// created one. The application's role owns a schema, so its last
// resource's decision_table: xa_decisions lives in <role>.xa_decisions. A
// transfer commits last in PostgreSQL; MariaDB's phase 2 meets a network
// partition, so the application is told committed with MariaDB pending,
// and stops. The operator runs xactl as the superuser, whose search_path
// resolves the same names to public. Before: opening the participant
// created public.xa_decisions, the scanner claimed its abort marker there,
// logged the abort and rolled MariaDB back, with PostgreSQL committed.
// Now: the participant's identity and its decision table are not found
// under that role, nothing is created, nothing is done, xactl exits 3 and
// says why; configured with the schema-qualified names, recovery commits
// MariaDB's branch.
func TestRecoveryAsAnotherRoleFindsOtherTables(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role := fmt.Sprintf("app_%d", nodeSeq.Add(1))
	if err := e.pg.Server.Exec(e.ctx, "", "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.pg.Server.Exec(context.Background(), e.pg.Name, "DROP OWNED BY "+role) //nolint:errcheck
		e.pg.Server.Exec(context.Background(), "", "DROP ROLE "+role)            //nolint:errcheck
	})
	// The role's schema comes first on its search_path ("$user", public);
	// nothing of xa's is in public (the test's environment put its own
	// identity there: it goes).
	if err := e.pg.Server.Exec(e.ctx, e.pg.Name, "CREATE SCHEMA "+role+" AUTHORIZATION "+role, "GRANT ALL ON kv TO "+role,
		"DROP TABLE public.xa_participant"); err != nil {
		t.Fatal(err)
	}
	proxy, myDSN := proxied(t, e.my)
	my, err := xamysql.Open(e.ctx, xamysql.Config{Name: myName, DSN: myDSN})
	if err != nil {
		t.Fatal(err)
	}
	defer my.Close()
	appPG := withUser(t, e.pg.DSN(), role)
	pg, err := xapg.Open(e.ctx, xapg.Config{Name: pgName, DSN: appPG, DecisionTable: "xa_decisions", Init: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	if table, _, _ := pg.DecisionTableIdentity(); table != role+".xa_decisions" {
		t.Fatalf("the application's decision table is %s, want %s.xa_decisions", table, role)
	}

	dir := filepath.Join(e.dir, "app-log")
	part := proxy.PartitionBefore("XA COMMIT")
	res, err := e.appTransfer(dir, my, pg, 9)
	if err != nil || !res.Committed || !slices.Equal(res.Pending, []string{myName}) || !part.Fired() {
		t.Fatalf("the transfer: %+v, %v (partition %v); want committed with %s pending", res, err, part.Fired(), myName)
	}
	my.Close()
	pg.Close()
	proxy.Heal()
	x := xa.BranchRef{ID: res.ID, Index: 0, Log: logID(t, dir)}.XID()
	if !e.myPrepared(x) || !e.pgRow(9) {
		t.Fatalf("after the transfer: MariaDB prepared %v, PostgreSQL row %v; want both", e.myPrepared(x), e.pgRow(9))
	}
	time.Sleep(appGrace + time.Second) // past the grace: presumed abort would be due

	super := e.participantsConfig("superuser.yaml", dir, fmt.Sprintf(
		"  - name: %s\n    driver: mysql\n    dsn: %s\n  - name: %s\n    driver: postgres\n    dsn: %s\n    decision_table: xa_decisions\n",
		myName, strconv.Quote(e.my.DSN()), pgName, strconv.Quote(e.pg.DSN())))
	var runs []result
	for _, cmd := range [][]string{{"list"}, {"recover"}, {"recover"}} {
		runs = append(runs, e.runWith(super, cmd...))
	}
	if !e.myPrepared(x) {
		t.Fatalf("recovery as the superuser rolled back MariaDB's branch of a transaction committed in PostgreSQL (row %v, MariaDB row %v): %s",
			e.pgRow(9), e.myRow(9), runs[len(runs)-1])
	}
	for _, r := range runs {
		r.want(t, 3)
		if !strings.Contains(r.stdout+r.stderr, "xa_participant") {
			t.Errorf("xactl %s does not say what it did not find: %s", r.args[2], r)
		}
	}
	var created bool
	if err := e.pgConn().QueryRow(e.ctx, "SELECT to_regclass('public.xa_decisions') IS NOT NULL OR to_regclass('public.xa_participant') IS NOT NULL").Scan(&created); err != nil || created {
		t.Fatalf("recovery created tables in public (%v, %v): it must never make a store", created, err)
	}
	if aborts := logAborts(t, dir); len(aborts) != 0 {
		t.Fatalf("the log holds abort records %v for a transaction committed in PostgreSQL", aborts)
	}

	// The operator names the tables schema-qualified: recovery finds the
	// recorded stores and commits the branch.
	right := e.participantsConfig("qualified.yaml", dir, fmt.Sprintf(
		"  - name: %s\n    driver: mysql\n    dsn: %s\n  - name: %s\n    driver: postgres\n    dsn: %s\n    decision_table: %s.xa_decisions\n    identity_table: %s.xa_participant\n",
		myName, strconv.Quote(e.my.DSN()), pgName, strconv.Quote(e.pg.DSN()), role, role))
	e.recoverUntilClean(right)
	e.wantRows(9, true, true)
}

// Issue 13, scenario 2: a participant has no identity. A transfer is
// decided and logged; PostgreSQL's phase 2 meets a partition, so the
// application is told committed with PostgreSQL pending. An xactl
// configuration whose pg reaches another database of the same server (one
// without an identity, then one that an operator set up), and whose maria
// reaches a staging MariaDB server, runs recover. Before: that database
// listed nothing, so the commit record was forgotten, and with the right
// configuration back the PostgreSQL branch, with no record, was presumed
// aborted: MariaDB committed, PostgreSQL rolled back. Now: the stores that
// answer are not the recorded ones, nothing is done there, the record is
// kept, xactl exits 3; with the right configuration the branch commits.
func TestRecoveryReachingAnotherDatabase(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	my, err := xamysql.Open(e.ctx, xamysql.Config{Name: myName, DSN: e.my.DSN()})
	if err != nil {
		t.Fatal(err)
	}
	defer my.Close()
	proxy, pgDSN := proxied(t, e.pg)
	pg, err := xapg.Open(e.ctx, xapg.Config{Name: pgName, DSN: pgDSN})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	dir := filepath.Join(e.dir, "app-log")
	part := proxy.PartitionBefore("COMMIT PREPARED")
	res, err := e.appTransfer(dir, my, pg, 11)
	if err != nil || !res.Committed || !slices.Equal(res.Pending, []string{pgName}) || !part.Fired() {
		t.Fatalf("the transfer: %+v, %v (partition %v); want committed with %s pending", res, err, part.Fired(), pgName)
	}
	my.Close()
	pg.Close()
	proxy.Heal()
	gid := xa.BranchRef{ID: res.ID, Index: 1, Log: logID(t, dir)}.XID().String()
	if !e.pgPrepared(gid) || !e.myRow(11) {
		t.Fatalf("after the transfer: PostgreSQL prepared %v, MariaDB row %v; want both", e.pgPrepared(gid), e.myRow(11))
	}
	time.Sleep(appGrace + time.Second)

	otherPG := e.pg.Server.CreateDB(t)
	stagingMy := dbtest.NewMySQLServer(t).CreateDB(t)
	wrong := e.participantsConfig("wrong.yaml", dir, fmt.Sprintf(
		"  - name: %s\n    driver: mysql\n    dsn: %s\n  - name: %s\n    driver: postgres\n    dsn: %s\n",
		myName, strconv.Quote(stagingMy.DSN()), pgName, strconv.Quote(otherPG.DSN())))
	first := e.runWith(wrong, "recover")
	if live := liveIn(t, dir); !slices.Contains(live, res.ID.String()) {
		t.Fatalf("the commit record of %s was forgotten while the participants answering were other databases (live: %v): %s", res.ID, live, first)
	}
	if first.want(t, 3); !strings.Contains(first.stderr, "identity") || !strings.Contains(first.stdout, "has no identity") {
		t.Fatalf("recover with databases without identity: %s", first)
	}
	// An operator sets those databases up: now they have identities, but
	// not the recorded ones.
	e.runWith(wrong, "participant", "init").want(t, 3).stdoutHas(t, "MISMATCH")
	for range 2 {
		r := e.runWith(wrong, "recover", "-o", "json")
		if live := liveIn(t, dir); !slices.Contains(live, res.ID.String()) {
			t.Fatalf("the commit record of %s was forgotten while the participants answering were other databases (live: %v): %s", res.ID, live, r)
		}
		if r.want(t, 3); !strings.Contains(r.stdout, "another database answers under this name") {
			t.Fatalf("recover does not say the stores are not the recorded ones: %s", r)
		}
	}
	// Nor does a resolution by hand act on another database, forced or not.
	e.runWith(wrong, "rollback", gid, "--participant", pgName, "--force", "--reason", "test").want(t, 1).stderrHas(t, "another database answers")
	if !e.pgPrepared(gid) {
		t.Fatal("PostgreSQL's branch is gone")
	}

	right := e.participantsConfig("right.yaml", dir, fmt.Sprintf(
		"  - name: %s\n    driver: mysql\n    dsn: %s\n  - name: %s\n    driver: postgres\n    dsn: %s\n",
		myName, strconv.Quote(e.my.DSN()), pgName, strconv.Quote(e.pg.DSN())))
	e.recoverUntilClean(right)
	e.wantRows(11, true, true)
	e.runWith(right, "recover").want(t, 0) // forgets what the last one resolved
	if live := liveIn(t, dir); len(live) != 0 {
		t.Fatalf("records left after recovery: %v", live)
	}
}

// recoverUntilClean runs xactl recover with cfg until it exits 0 (nothing
// left in doubt), for up to 30 s.
func (e *env) recoverUntilClean(cfg string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.runWith(cfg, "recover")
		if r.code == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("recover did not finish: %s", r)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func logID(t *testing.T, dir string) xa.LogID {
	t.Helper()
	s, err := filelog.ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s.Identity().ID
}

func logAborts(t *testing.T, dir string) []xa.AbortRecord {
	t.Helper()
	s, err := filelog.ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	as, err := s.Aborts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return as
}

func liveIn(t *testing.T, dir string) []string {
	t.Helper()
	s, err := filelog.ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.Commits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.ID.String())
	}
	return out
}
