package postgres

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// The start-up check on a well configured server: every finding is fine;
// an old prepared transaction is reported with its gid, and Open logs it.
func TestCheck(t *testing.T) {
	t.Parallel()
	db, rm := setup(t)
	ctx := testCtx(t)
	fs, err := rm.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"server_version_num", "max_prepared_transactions", "pg_prepared_xacts", "superuser", "oldest prepared transaction"} {
		if f := finding(fs, name); f.Severity != xa.SeverityOK {
			t.Errorf("%s: %+v, want ok", name, f)
		}
	}
	if v := finding(fs, "server_version_num").Value; !strings.HasPrefix(v, "1") || len(v) != 6 {
		t.Errorf("server_version_num = %q", v)
	}

	x := newXID(t)
	b, s := start(t, rm, ctx, x)
	exec(t, s, "INSERT INTO kv VALUES (1, 1)")
	prepare(t, b, xa.VotePrepared)
	defer b.Rollback(ctx) //nolint:errcheck
	rm.oldPrepared = 0
	fs, err = rm.Check(ctx)
	if err != nil {
		t.Fatal(err) // a warning is not a failure
	}
	f := finding(fs, "oldest prepared transaction")
	if f.Severity != xa.SeverityWarn || !strings.Contains(f.Value, x.String()) || !strings.Contains(f.Fix, "VACUUM") {
		t.Fatalf("old prepared transaction: %+v", f)
	}

	var log bytes.Buffer
	rm2, err := Open(ctx, Config{Name: "pg", DSN: db.DSN(), MaxConns: 1000, Init: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rm2.Close()
	if !strings.Contains(log.String(), "max_prepared_transactions") || !strings.Contains(log.String(), "level=WARN") {
		t.Errorf("Open with a pool larger than max_prepared_transactions logged:\n%s", log.String())
	}
}

// Open fails clearly on a bad configuration, without leaking passwords.
func TestOpenErrors(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{DSN: db.DSN()}, []string{"Name is required"}},
		{Config{Name: "pg", DSN: "postgres://u:s3cret@host:notaport/db"}, []string{"invalid DSN"}},
		{Config{Name: "pg", DSN: "host=127.0.0.1 port=1 user=u password=s3cret dbname=x sslmode=disable connect_timeout=5"}, []string{"cannot reach the database", "127.0.0.1"}},
		{Config{Name: "pg", DSN: db.Server.DSN("no_such_database")}, []string{"no such database", "no_such_database"}},
		{Config{Name: "pg", DSN: db.Server.DSN(db.Name) + "&user=nosuchuser"}, []string{"the server refused the login", "nosuchuser"}},
	} {
		rm, err := Open(ctx, tc.cfg)
		if err == nil {
			rm.Close()
			t.Errorf("Open(%q) succeeded", tc.cfg.DSN)
			continue
		}
		var xe *xa.Error
		if !errors.As(err, &xe) || xe.Op != "open" || (tc.cfg.Name != "" && !strings.Contains(tc.cfg.DSN, "notaport") && !errors.Is(err, xa.ErrConnect)) {
			t.Errorf("Open(%q) = %#v, want an *xa.Error of op open", tc.cfg.DSN, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%q) = %q, want it to mention %q", tc.cfg.DSN, err, w)
			}
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) error leaks the password: %q", tc.cfg.DSN, err)
		}
	}
}
