package sqlsink

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/sink"
)

// TestTableValidateDuplicateKeyColumn checks that the configuration
// refuses a key column, or a mapped column, named twice. Found by a review:
// Key [k k] was taken as "exactly the columns" of a two-column unique index
// (k, x) (the check compares lengths and membership only); on MySQL the
// buffer then keyed rows by k alone and kept only the last of two records
// (k=1,x=a), (k=1,x=b) that the table holds as two rows, and PostgreSQL's
// ON CONFLICT ("k","k") refused at run time. It printed:
//
//	Key [k k] accepted against the only unique key (k, x); want it refused (validate or CheckTables)
func TestTableValidateDuplicateKeyColumn(t *testing.T) {
	cols := []Column{{Name: "k", From: "$.k"}, {Name: "x", From: "$.x"}}
	for _, tb := range []Table{
		{Name: "t", Target: "maria", Upsert: true, Key: []string{"k", "k"}, Columns: cols},
		{Name: "t", Target: "maria", Upsert: true, Key: []string{"k", "x", "k"}, Columns: cols},
		{Name: "t", Target: "maria", Columns: append(cols, Column{Name: "k", From: "key"})},
	} {
		err := tb.validate()
		if !errors.Is(err, sink.ErrConfig) || !strings.Contains(err.Error(), "twice") {
			t.Errorf("key %v, columns %v: validate says %v, want ErrConfig: ... twice", tb.Key, tb.Columns, err)
		}
	}
}

// TestCheckTablesPGView checks that CheckTables refuses a PostgreSQL view
// or materialized view (TableError.Relkind), which the sink cannot COPY
// into, and takes a partitioned table. Found by a review: a view passed
// the check (to_regclass finds it, pg_attribute has its columns), and
// every checkpoint's COPY into it failed:
//
//	CheckTables accepted view vv, but COPY into it (every INSERT checkpoint) fails:
//	  ERROR: cannot copy to view "vv" (SQLSTATE 42809)
func TestCheckTablesPGView(t *testing.T) {
	pg := dbtest.PostgresDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.Server.Exec(ctx, pg.Name, "CREATE TABLE base (k text, v text)", "CREATE VIEW vv AS SELECT k, v FROM base",
		"CREATE MATERIALIZED VIEW mv AS SELECT k, v FROM base",
		"CREATE TABLE parted (k text, v text) PARTITION BY LIST (k)", "CREATE TABLE parted_a PARTITION OF parted DEFAULT"); err != nil {
		t.Fatal(err)
	}
	cols := []Column{{Name: "k", From: "key"}, {Name: "v", From: "$.v"}}
	tables := []Table{{Name: "vv", Target: "pg", Columns: cols}, {Name: "mv", Target: "pg", Columns: cols},
		{Name: "parted", Target: "pg", Columns: cols}, {Name: "base", Target: "pg", Columns: cols}}
	tes, err := CheckTables(ctx, TargetConfig{Name: "pg", Driver: DriverPostgres, DSN: pg.DSN(), Init: true}, tables)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"view", "materialized view", "", ""} {
		te := tes[i]
		switch {
		case want == "" && te != nil:
			t.Errorf("%s: CheckTables says %v, want it taken", tables[i].Name, te)
		case want != "" && (te == nil || te.Relkind != want || !errors.Is(te, ErrTable)):
			t.Errorf("%s: CheckTables says %v, want a TableError with Relkind %q", tables[i].Name, te, want)
		case te != nil:
			t.Log(te)
		}
	}
	c, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.CopyFrom(ctx, pgx.Identifier{"parted"}, []string{"k", "v"}, pgx.CopyFromRows([][]any{{"a", "b"}})); err != nil {
		t.Errorf("COPY into the partitioned table CheckTables takes: %v", err)
	}
}

// TestCheckTablesMariaDBCase checks that on a case-sensitive server
// (lower_case_table_names=0) CheckTables tells tables `Ev` (with a primary
// key on k) and `ev` (without) apart, and does not find `EV`, which does
// not exist. Written by a review, which suspected that the comparison of
// TABLE_NAME in information_schema (case-insensitive collation on
// MariaDB) would merge them; it passed from the start and is kept as a
// regression test.
func TestCheckTablesMariaDBCase(t *testing.T) {
	my := dbtest.MySQLDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var lctn int
	if err := db.QueryRowContext(ctx, "SELECT @@lower_case_table_names").Scan(&lctn); err != nil {
		t.Fatal(err)
	}
	if lctn != 0 {
		t.Skipf("lower_case_table_names=%d", lctn)
	}
	if err := my.Server.Exec(ctx, my.Name, "CREATE TABLE `Ev` (k VARCHAR(10) PRIMARY KEY, v INT)", "CREATE TABLE `ev` (k VARCHAR(10), v INT, w INT)"); err != nil {
		t.Fatal(err)
	}
	cols := []Column{{Name: "k", From: "key"}, {Name: "v", From: "$.v"}}
	tables := []Table{
		{Name: "ev", Target: "maria", Columns: cols, Upsert: true, Key: []string{"k"}},       // no key: must be refused
		{Name: "EV", Target: "maria", Columns: cols},                                         // no such table
		{Name: "Ev", Target: "maria", Columns: append(cols, Column{Name: "w", From: "$.w"})}, // no column w
	}
	tes, err := CheckTables(ctx, TargetConfig{Name: "maria", Driver: DriverMySQL, DSN: my.DSN(), Init: true}, tables)
	if err != nil {
		t.Fatal(err)
	}
	for i, te := range tes {
		t.Logf("%s: %v", tables[i].Name, te)
	}
	if tes[0] == nil || tes[0].Key == nil {
		t.Errorf("upsert into `ev` (no unique key) accepted: the primary key of `Ev` was taken for it")
	}
	if tes[1] == nil || !tes[1].Missing {
		t.Errorf("table `EV`, which does not exist, accepted: %v", tes[1])
	}
	if tes[2] == nil || tes[2].Columns == nil {
		t.Errorf("`Ev` lacks column w but was accepted (w of `ev` counted for it)")
	}
}

// TestCheckTablesMySQLOtherUnique checks that CheckTables refuses a MySQL
// upsert table that has a unique key besides the upsert key's
// (TableError.OtherUniques): ON DUPLICATE KEY UPDATE fires on any of them,
// so a record with a new key whose other column collides would update
// another key's row (the record lost, silently; PostgreSQL's ON CONFLICT
// (key) fails loudly instead). A unique key holding an unmapped
// AUTO_INCREMENT column (the common surrogate id) is no danger and is
// taken; PostgreSQL tables are not concerned. Found by a review, which
// printed:
//
//	MySQL upsert on k accepted with a second unique key on mapped column email:
//	  ON DUPLICATE KEY UPDATE may update another key's row
func TestCheckTablesMySQLOtherUnique(t *testing.T) {
	tb := Table{Name: "t", Target: "maria", Upsert: true, Key: []string{"k"},
		Columns: []Column{{Name: "k", From: "$.k"}, {Name: "email", From: "$.email"}}}
	sh := tableShape{exists: true, columns: []string{"k", "email"}, uniques: [][]string{{"k"}, {"email"}}, foldCase: true, anyUnique: true}
	if te := sh.check("maria", tb); te == nil || len(te.OtherUniques) != 1 || te.OtherUniques[0][0] != "email" {
		t.Errorf("MySQL upsert on k with a second unique key on email: %v, want a TableError naming (email)", te)
	}
	sh.anyUnique = false // PostgreSQL: ON CONFLICT (k) names its arbiter
	if te := sh.check("pg", tb); te != nil {
		t.Errorf("PostgreSQL upsert on k with a second unique key on email refused: %v", te)
	}

	my := dbtest.MySQLDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := my.Server.Exec(ctx, my.Name,
		"CREATE TABLE other (k VARCHAR(10) PRIMARY KEY, email VARCHAR(64), UNIQUE KEY (email))",
		"CREATE TABLE unmapped (k VARCHAR(10) PRIMARY KEY, email VARCHAR(64), code INT NOT NULL DEFAULT 0, UNIQUE KEY (code))",
		"CREATE TABLE surrogate (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(10) NOT NULL, email VARCHAR(64), UNIQUE KEY (k))"); err != nil {
		t.Fatal(err)
	}
	tables := []Table{tb, tb, tb}
	tables[0].Name, tables[1].Name, tables[2].Name = "other", "unmapped", "surrogate"
	tes, err := CheckTables(ctx, TargetConfig{Name: "maria", Driver: DriverMySQL, DSN: my.DSN(), Init: true}, tables)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"(email)", "(code)", ""} {
		te := tes[i]
		switch {
		case want == "" && te != nil:
			t.Errorf("%s: CheckTables says %v, want it taken", tables[i].Name, te)
		case want != "" && (te == nil || !strings.Contains(te.Error(), "unique key "+want+" besides the upsert key")):
			t.Errorf("%s: CheckTables says %v, want the other unique key %s named", tables[i].Name, te, want)
		case te != nil:
			t.Log(te)
		}
	}
}
