package cli_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
)

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// configWith returns the test's configuration with the participants' DSNs
// replaced.
func (e *env) configWith(myDSN, pgDSN string) string {
	text := e.configText("10m")
	text = strings.Replace(text, strconv.Quote(e.my.DSN()), strconv.Quote(myDSN), 1)
	text = strings.Replace(text, strconv.Quote(e.pg.DSN()), strconv.Quote(pgDSN), 1)
	return text
}

// TestListUnreachable: with every participant unreachable, list does not
// say "No prepared branches": it says that none of them could be listed
// and that nothing is known about them, and exits 1; with one unreachable,
// it says which, lists the other, and exits 1.
func TestListUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	port := closedPort(t)
	myDown := fmt.Sprintf("u:p@tcp(127.0.0.1:%d)/db?timeout=5s", port)
	pgDown := fmt.Sprintf("postgres://u@127.0.0.1:%d/db?sslmode=disable&connect_timeout=5", port)
	cfg := e.writeConfig("down.yaml", e.configWith(myDown, pgDown))

	r := e.runWith(cfg, "list").want(t, 1)
	r.stdoutHas(t, "None of the 2 participants could be listed", "nothing is known about their prepared branches", myName+": could not be opened", pgName+": could not be opened")
	if strings.Contains(r.stdout, "No prepared branches") {
		t.Errorf("list says there are no prepared branches on participants it could not list: %s", r)
	}
	r.stderrHas(t, "2 of 2 participants could not be listed")
	var out listJSON
	e.runWith(cfg, "list", "-o", "json").want(t, 1).json(t, &out)
	if len(out.Listed) != 0 || len(out.Unlisted) != 2 || len(out.Branches) != 0 {
		t.Errorf("list -o json with every participant down: listed %v, unlisted %+v, branches %d", out.Listed, out.Unlisted, len(out.Branches))
	}

	// One down: the other is listed, the missing one named.
	tx := e.prepare(1)
	cfg = e.writeConfig("mydown.yaml", e.configWith(myDown, e.pg.DSN()))
	r = e.runWith(cfg, "list").want(t, 1)
	r.stdoutHas(t, tx.pg.String(), "1 participant could not be listed", myName+": could not be opened")
	e.runWith(cfg, "list", "-o", "json").want(t, 1).json(t, &out)
	if len(out.Listed) != 1 || out.Listed[0] != pgName || len(out.Unlisted) != 1 || out.Unlisted[0].Participant != myName {
		t.Errorf("list -o json with maria down: listed %v, unlisted %+v", out.Listed, out.Unlisted)
	}
	e.wantPrepared(tx, true, true)
}

// TestUnreachableRecord: a commit record naming a configured participant
// that could not be opened is kept, and the reason says so ("could not be
// opened: ..."), not "not configured".
func TestUnreachableRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tx := e.prepare(1)
	e.logCommit(tx.record())
	myDown := fmt.Sprintf("u:p@tcp(127.0.0.1:%d)/db?timeout=5s", closedPort(t))
	cfg := e.writeConfig("mydown.yaml", e.configWith(myDown, e.pg.DSN()))

	r := e.runWith(cfg, "recover", "-o", "json").want(t, 1)
	var out recoverJSON
	r.json(t, &out)
	if b := findBranch(t, out.Branches, pgName, tx.pg.String()); b.Action != "commit" || !b.Done {
		t.Errorf("the branch on the reachable participant: %+v, want committed", b)
	}
	var reason string
	for _, k := range out.Kept {
		if k.GlobalID == tx.id.String() {
			reason = k.Reason
		}
	}
	if !strings.Contains(reason, `participant "`+myName+`" could not be opened`) || strings.Contains(reason, "not configured") {
		t.Errorf("record kept for %q, want %q could not be opened", reason, myName)
	}
	e.wantPrepared(tx, true, false)
	e.wantRows(1, false, true)
	if live := e.liveRecords(); len(live) != 1 {
		t.Errorf("live records = %v, want the kept one", live)
	}
}

// TestWrongCredentials: a participant whose DSN has a wrong password (or a
// user the server does not know) is reported as a failed login, not as a
// database "misconfigured for two-phase commit", by list, recover and
// doctor.
func TestWrongCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mc, err := gomysql.ParseDSN(e.my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	// A user with a password, given the wrong one.
	user := "xt_" + strings.ReplaceAll(e.node, "-", "_")
	if err := e.my.Server.Exec(e.ctx, "", fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'right'", user)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.my.Server.Exec(context.Background(), "", fmt.Sprintf("DROP USER '%s'@'%%'", user)) }) //nolint:errcheck
	mc.User, mc.Passwd = user, "wrong"
	myBad := mc.FormatDSN()
	u, err := url.Parse(e.pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("nosuchuser_"+strings.ReplaceAll(e.node, "-", "_"), "x")
	pgBad := u.String()
	cfg := e.writeConfig("badauth.yaml", e.configWith(myBad, pgBad))

	for _, args := range [][]string{{"list"}, {"recover", "--dry-run"}, {"recover"}} {
		r := e.runWith(cfg, args...).want(t, 1)
		all := r.stdout + r.stderr
		if strings.Contains(all, "misconfigured for two-phase commit") {
			t.Errorf("a wrong password is called a two-phase-commit misconfiguration: %s", r)
		}
		if !strings.Contains(all, myName+": could not be opened: authentication failed as user '"+user+"'") {
			t.Errorf("the wrong password is not reported as a failed login: %s", r)
		}
		if strings.Contains(all, "'"+user+"'@'%'") {
			t.Errorf("the failed login names a host the server did not say: %s", r)
		}
		if !strings.Contains(all, pgName+": could not be opened: the server refused the login") {
			t.Errorf("the unknown user is not reported as a refused login: %s", r)
		}
	}
	r := e.runWith(cfg, "doctor", "-o", "json").want(t, 1)
	var d doctorJSON
	r.json(t, &d)
	for _, res := range d.Results {
		if res.Subject != "participant "+myName {
			continue
		}
		if len(res.Findings) != 1 || res.Findings[0].Check != "connect" || !strings.Contains(res.Findings[0].Value, "authentication failed") ||
			strings.Contains(res.Findings[0].Value, "misconfigured") || !strings.Contains(res.Findings[0].Fix, "password") {
			t.Errorf("doctor on a wrong password: %+v", res.Findings)
		}
	}
}
