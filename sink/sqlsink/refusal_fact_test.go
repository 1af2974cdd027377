package sqlsink_test

import (
	"database/sql"
	"errors"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/internal/testrig/dbtest"
)

// TestMariaDBRefusalInXABranch shows the server facts the narrowing of a
// refused batch rests on (docs/server-facts.md): inside an XA branch
// (XA START ... XA END) on MariaDB 10.11 in a strict session, a multi-row
// INSERT that the server refuses (1406, data too long) undoes that
// statement only: the branch goes on, its earlier rows stay, a later
// statement is accepted, and the branch prepares and commits with them.
// SAVEPOINT and ROLLBACK TO SAVEPOINT are accepted inside the branch
// too, but the sink needs none there: it relies on the statement's own
// rollback, which costs nothing when no statement is refused.
func TestMariaDBRefusalInXABranch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	my := dbtest.MySQLDB(t)
	if err := my.Server.Exec(ctx, my.Name, "CREATE TABLE r (k INT PRIMARY KEY, v VARCHAR(3) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg, err := gomysql.ParseDSN(my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = map[string]string{"sql_mode": "'STRICT_ALL_TABLES'"}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exec := func(q string, args ...any) error {
		_, err := c.ExecContext(ctx, q, args...)
		return err
	}
	must := func(q string, args ...any) {
		t.Helper()
		if err := exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	must("XA START 'fact-refusal'")
	must("INSERT INTO r VALUES (1, 'a'), (2, 'b')")
	err = exec("INSERT INTO r VALUES (3, 'c'), (4, 'too long'), (5, 'e')")
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1406 {
		t.Fatalf("a value too long in a strict session inside XA: %v; want 1406", err)
	}
	t.Logf("refused statement: %v", err)
	// MySQL's manual lists no savepoints among XA's restrictions, and
	// MariaDB 10.11 accepts them inside a branch: ROLLBACK TO SAVEPOINT
	// undoes what followed it, the branch goes on.
	must("SAVEPOINT s")
	must("INSERT INTO r VALUES (7, 'g')")
	must("ROLLBACK TO SAVEPOINT s")
	must("INSERT INTO r VALUES (6, 'f')")
	must("XA END 'fact-refusal'")
	must("XA PREPARE 'fact-refusal'")
	must("XA COMMIT 'fact-refusal'")
	var n, sum int
	if err := db.QueryRowContext(ctx, "SELECT count(*), COALESCE(sum(k), 0) FROM r").Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	if n != 3 || sum != 1+2+6 {
		t.Fatalf("the branch committed %d rows (sum of keys %d); want rows 1, 2 and 6: the refused statement undone alone", n, sum)
	}
}
