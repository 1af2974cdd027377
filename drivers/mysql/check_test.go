package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

func TestVersionFinding(t *testing.T) {
	for v, want := range map[string]xa.Severity{
		"10.11.19-MariaDB-0+deb12u1": xa.SeverityOK,
		"10.5.0-MariaDB":             xa.SeverityOK,
		"10.4.34-MariaDB-log":        xa.SeverityFail,
		"8.0.36":                     xa.SeverityOK,
		"8.4.0-commercial":           xa.SeverityOK,
		"5.7.44-log":                 xa.SeverityFail,
		"11.4.2-MariaDB":             xa.SeverityOK,
	} {
		f := versionFinding(parseVersion(v))
		if f.Severity != want || (want == xa.SeverityFail) != (f.Fix != "") {
			t.Errorf("%s: %+v, want %v", v, f, want)
		}
	}
	if si := parseVersion("8.0.29"); si.mariaDB || !si.atLeast(8, 0, 29) || si.atLeast(8, 0, 30) {
		t.Errorf("parseVersion(8.0.29) = %+v", si)
	}
}

func findings(t *testing.T, fs []xa.Finding) map[string]xa.Finding {
	t.Helper()
	m := map[string]xa.Finding{}
	for _, f := range fs {
		m[f.Name] = f
		t.Logf("%-32s %-5v %s %s", f.Name, f.Severity, f.Value, f.Fix)
	}
	return m
}

// The start-up check on the test server (root): nothing fails, and the
// findings name what they looked at.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := setup(t)
	rm := openRM(t, db.DSN())
	fs, err := rm.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := findings(t, fs)
	for _, name := range []string{"server version", "InnoDB", "default_storage_engine", "XA RECOVER", "PROCESS privilege",
		"innodb_lock_wait_timeout", "innodb_flush_log_at_trx_commit", "log_bin"} {
		f, ok := m[name]
		if !ok {
			t.Errorf("no %q finding", name)
			continue
		}
		if f.Severity == xa.SeverityFail {
			t.Errorf("%s fails on the test server: %+v", name, f)
		}
		if f.Severity != xa.SeverityOK && f.Fix == "" {
			t.Errorf("%s: %v without a fix", name, f.Severity)
		}
	}
	if f := m["PROCESS privilege"]; f.Severity != xa.SeverityOK {
		t.Errorf("root lacks PROCESS? %+v", f)
	}
}

var userSeq atomic.Int64

// A real restricted user (table privileges on the test database only): on
// MariaDB XA RECOVER is permitted (and lists every user's branches) and the
// check passes with a warning, with the GRANT to run, about the missing
// PROCESS privilege, which says that branches finished from another
// session stay pending. XA works for that user on the branch's own
// session, and UnlistedPrepared reports the missing privilege as
// ErrMisconfigured with the fix. (TestPhase2PendingWithoutProcess: phase 2
// from another session.)
func TestCheckRestrictedUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, raw := setup(t)
	openRM(t, db.DSN()) // the participant set up by an administrator, as xactl participant init does
	user := fmt.Sprintf("xa_r%d", userSeq.Add(1))
	mustExec(t, raw, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'pw'", user))
	t.Cleanup(func() { raw.Exec(fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
	mustExec(t, raw, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s.* TO '%s'@'%%'", db.Name, user))
	cfg, _ := gomysql.ParseDSN(db.DSN())
	cfg.User, cfg.Passwd = user, "pw"
	rm := openRM(t, cfg.FormatDSN())
	fs, err := rm.Check(ctx)
	m := findings(t, fs)
	proc := m["PROCESS privilege"]
	if proc.Severity != xa.SeverityWarn || !strings.Contains(proc.Fix, fmt.Sprintf("GRANT PROCESS ON *.* TO '%s'@'%%'", user)) ||
		!strings.Contains(proc.Value, "stay pending") || !strings.Contains(proc.Fix, "stays pending") {
		t.Fatalf("PROCESS finding %+v", proc)
	}
	rec := m["XA RECOVER"]
	if isMariaDB(db) {
		if err != nil || rec.Severity != xa.SeverityOK {
			t.Fatalf("MariaDB: XA RECOVER %+v, %v; want permitted", rec, err)
		}
	} else if rec.Severity == xa.SeverityFail && !strings.Contains(rec.Fix, "XA_RECOVER_ADMIN") {
		t.Fatalf("MySQL 8: %+v", rec)
	}
	// XA itself works with table privileges.
	x := newXID(t)
	b, err := rm.Start(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, conn(b), "INSERT INTO kv VALUES (1, 1)")
	if v, err := b.Prepare(ctx); v != xa.VotePrepared {
		t.Fatal(v, err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := getV(t, raw, 1); !ok {
		t.Fatal("not committed")
	}
	_, err = rm.UnlistedPrepared(ctx)
	wantKind(t, err, xa.ErrMisconfigured)
	if !strings.Contains(err.Error(), "GRANT") {
		t.Fatalf("%v: want the fix", err)
	}
}

// Open fails clearly: no name and an unparsable DSN (errors of the
// caller's configuration, of no kind: the database is not misconfigured),
// a wrong password (a failed login naming the user, not a host the server
// did not say), an unknown database, no server (a connection error naming
// the address).
func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.MySQLDB(t)
	var xe *xa.Error
	_, err := Open(ctx, Config{DSN: db.DSN()})
	if !errors.As(err, &xe) || xe.Kind != nil {
		t.Fatalf("no name: %v; want an *xa.Error of no kind", err)
	}

	_, err = Open(ctx, Config{Name: "x", DSN: "not a dsn"})
	if !errors.As(err, &xe) || xe.Kind != nil || errors.Is(err, xa.ErrMisconfigured) ||
		strings.Contains(err.Error(), "misconfigured") || !strings.Contains(err.Error(), "invalid DSN") {
		t.Fatalf("invalid DSN: %v; want an *xa.Error of no kind saying invalid DSN", err)
	}

	cfg, _ := gomysql.ParseDSN(db.DSN())
	cfg.Passwd = "wrong password"
	_, err = Open(ctx, Config{Name: "x", DSN: cfg.FormatDSN()})
	wantKind(t, err, xa.ErrConnect)
	wantMySQLErr(t, err, erAccessDenied)
	if errors.Is(err, xa.ErrMisconfigured) || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("a wrong password: %v; want a failed login, not a two-phase-commit misconfiguration", err)
	}
	if !strings.Contains(err.Error(), "as user '"+cfg.User+"' at") || strings.Contains(err.Error(), "@'%'") {
		t.Fatalf("a wrong password: %v; want the user named, and no host the server did not say", err)
	}

	cfg, _ = gomysql.ParseDSN(db.DSN())
	cfg.DBName = "no_such_database"
	_, err = Open(ctx, Config{Name: "x", DSN: cfg.FormatDSN()})
	wantKind(t, err, xa.ErrConnect)
	wantMySQLErr(t, err, erBadDB)
	if !strings.Contains(err.Error(), "no such database") {
		t.Fatalf("unknown database: %v", err)
	}

	dsn := closedPortDSN(t)
	_, err = Open(ctx, Config{Name: "x", DSN: dsn})
	if !errors.Is(err, xa.ErrConnect) || errors.Is(err, xa.ErrMisconfigured) || !strings.Contains(err.Error(), "cannot reach the server") {
		t.Fatalf("closed port: %v", err)
	}
	rm, err := Open(ctx, Config{Name: "x", DSN: dsn, SkipCheck: true})
	if err != nil {
		t.Fatalf("SkipCheck: %v", err)
	}
	rm.Close()
}
