package sqlsink_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/sink/filesource"
	"github.com/xadb/xa/sink/sqlsink"
)

// TestMySQLStrictSessions: the sink's MariaDB sessions run in strict
// mode whatever the sql_mode they would have had (issue 18, item 3). The
// target's DSN sets an empty sql_mode (as a server whose default is not strict
// does): "abc" into INT, 50 characters into VARCHAR(10) and a missing
// value for a NOT NULL column are each refused, the run stops, and the
// table stays empty. Before, each landed changed: 0, the first 10
// characters, the empty string.
func TestMySQLStrictSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	if err := e.my.Server.Exec(ctx, e.my.Name, "CREATE TABLE strictness (id BIGINT NOT NULL, n INT NOT NULL, s VARCHAR(10) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	mc, err := gomysql.ParseDSN(e.my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	mc.Params["sql_mode"] = "''"
	for i := range e.cfg.Targets {
		if e.cfg.Targets[i].Name == tgMy {
			e.cfg.Targets[i].DSN = mc.FormatDSN()
		}
	}
	cols := []sqlsink.Column{{Name: "id", From: "$.id"}, {Name: "n", From: "$.n"}, {Name: "s", From: "$.s"}}
	e.cfg.Tables = []sqlsink.Table{{ID: "my", Target: tgMy, Name: "strictness", Columns: cols}}
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	opts := runOpts()
	opts.MaxAborts = 1
	for _, tc := range []struct{ name, line string }{
		{"text into INT", `{"id": 1, "n": "abc", "s": "ok"}`},
		{"50 characters into VARCHAR(10)", `{"id": 2, "n": 2, "s": "` + strings.Repeat("x", 50) + `"}`},
		{"missing NOT NULL value", `{"id": 3, "n": 3}`},
	} {
		path := filepath.Join(t.TempDir(), "bad.ndjson")
		if err := os.WriteFile(path, []byte(tc.line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		src, err := filesource.New(filesource.Config{Files: []string{path}})
		if err != nil {
			t.Fatal(err)
		}
		s := e.open()
		err = s.Run(ctx, src, opts)
		src.Close()
		s.Close()
		var rows []string
		r, qerr := db.QueryContext(ctx, "SELECT CONCAT(id, ' ', n, ' ', QUOTE(s)) FROM strictness")
		if qerr != nil {
			t.Fatal(qerr)
		}
		for r.Next() {
			var row string
			r.Scan(&row) //nolint:errcheck
			rows = append(rows, row)
		}
		r.Close()
		if err == nil || len(rows) > 0 {
			t.Errorf("%s: Run returned %v and the table holds %q; want the record refused and nothing stored", tc.name, err, rows)
		} else {
			t.Logf("%s: refused: %v", tc.name, err)
		}
		db.ExecContext(ctx, "DELETE FROM strictness") //nolint:errcheck
	}
}

// TestRequiredColumn: a table's Required column makes a record whose
// value lacks the column's path a bad record (a *MappingError naming the
// record's partition and position, wrapping a *MissingError naming the
// column), not a NULL (issue 18, item 3: a misspelt $.meta.regoin landed
// as NULL in every row with no warning). Without Required it lands NULL,
// as before.
func TestRequiredColumn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "CREATE TABLE regions (id bigint NOT NULL, region text)"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "regions.ndjson")
	if err := os.WriteFile(path, []byte(`{"id": 1, "meta": {"region": "eu"}}`+"\n"+`{"id": 2, "meta": {"regoin": "us"}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cols := []sqlsink.Column{{Name: "id", From: "$.id"}, {Name: "region", From: "$.meta.region"}}
	opts := runOpts()
	opts.MaxAborts = 1
	count := func() (n, nulls int) {
		c, err := pgxConnect(ctx, e.pg.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE region IS NULL) FROM regions").Scan(&n, &nulls); err != nil {
			t.Fatal(err)
		}
		return n, nulls
	}
	run := func(required []string) error {
		e.cfg.Tables = []sqlsink.Table{{ID: "pg", Target: tgPg, Name: "regions", Columns: cols, Required: required}}
		src, err := filesource.New(filesource.Config{Files: []string{path}})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		s := e.open()
		defer s.Close()
		return s.Run(ctx, src, opts)
	}
	err := run([]string{"region"})
	var me *sqlsink.MappingError
	var miss *sqlsink.MissingError
	if !errors.As(err, &me) || !errors.As(err, &miss) || me.Partition != path || me.Position == "" || miss.Column != "region" {
		t.Fatalf("Run with region required: %v; want a *MappingError of %s wrapping a *MissingError of column region", err, path)
	}
	t.Logf("refused: %v", err)
	if n, _ := count(); n != 0 {
		t.Errorf("regions holds %d rows after the refusal, want 0", n)
	}
	if err := run(nil); err != nil {
		t.Fatal(err)
	}
	if n, nulls := count(); n != 2 || nulls != 1 {
		t.Errorf("without required: %d rows, %d NULL regions; want 2 and 1", n, nulls)
	}
}

// TestPostgresEncodeError: a value pgx cannot encode for its column
// ("abc" for a bigint, written by COPY) is reported as an *EncodeError
// naming the table and pgx's reason (issue 18, item 2), not as the
// SQLSTATE 57014 (query canceled) the server answers pgx's CopyFail with.
func TestPostgresEncodeError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "CREATE TABLE typed (id bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "typed.ndjson")
	if err := os.WriteFile(path, []byte(`{"id": "abc"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.cfg.Tables = []sqlsink.Table{{ID: "pg", Target: tgPg, Name: "typed", Columns: []sqlsink.Column{{Name: "id", From: "$.id"}}}}
	src, err := filesource.New(filesource.Config{Files: []string{path}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	s := e.open()
	defer s.Close()
	opts := runOpts()
	opts.MaxAborts = 1
	err = s.Run(ctx, src, opts)
	var ee *sqlsink.EncodeError
	if !errors.As(err, &ee) || strings.Contains(err.Error(), "57014") {
		t.Fatalf("Run: %v; want an *EncodeError, not SQLSTATE 57014", err)
	}
	t.Logf("refused: %v", err)
}
