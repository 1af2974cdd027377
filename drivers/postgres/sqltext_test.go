package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/xadb/xa/internal/testrig/dbtest"
)

func TestTransactionControlTable(t *testing.T) {
	refused := []string{
		"COMMIT", "commit", "Commit;", "COMMIT WORK", "COMMIT AND CHAIN", "END", "end transaction",
		"ROLLBACK", "rollback work", "ROLLBACK AND CHAIN", "ABORT", "abort transaction",
		"BEGIN", "begin isolation level serializable", "START TRANSACTION", "start transaction read only",
		"PREPARE TRANSACTION 'x'", "prepare transaction E'x'", "COMMIT PREPARED 'x'", "ROLLBACK PREPARED 'x'",
		// Comments, whitespace and empty statements do not hide the keyword.
		"  \t\n\r\f\vCOMMIT", "-- a comment\nCOMMIT", "-- a comment\rCOMMIT", "/* c */COMMIT", "/* a /* nested */ comment */ COMMIT",
		";COMMIT", " ; ;; COMMIT", "/**/;/**/ROLLBACK", "COMMIT--x", "COMMIT/*x*/", "PREPARE/*x*/TRANSACTION 'x'",
		"PREPARE -- x\n TRANSACTION 'x'", "ROLLBACK /* x */ PREPARED 'x'", "ROLLBACK; SELECT 1", "COMMIT; SELECT 1",
		"rollback transaction", "ROLLBACK WORK PREPARED",
	}
	allowed := []string{
		"SELECT 1", "INSERT INTO kv VALUES (1, 1)", "UPDATE kv SET v = 1; COMMIT", // the server refuses the second statement
		"SAVEPOINT s", "RELEASE SAVEPOINT s", "RELEASE s", "ROLLBACK TO SAVEPOINT s", "ROLLBACK TO s",
		"rollback work to savepoint s", "ROLLBACK TRANSACTION TO s", "/* x */ ROLLBACK /* y */ TO s",
		"PREPARE q AS SELECT 1", "prepare transactions AS SELECT 1", "EXECUTE q", "DEALLOCATE q",
		`"COMMIT"`, "SELECT 'COMMIT'", "-- COMMIT\nSELECT 1", "/* COMMIT */ SELECT 1", "/* /* COMMIT */ */ SELECT 1",
		"committed", "commit_log", "beginning", "ending", "COMMIT$1", "COMMITé", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
		"DO $$BEGIN PERFORM 1; END$$", "WITH x AS (SELECT 1) SELECT * FROM x", "", "   ", "-- only a comment",
		"/* unterminated COMMIT", "CALL p()",
	}
	for _, s := range refused {
		if _, ok := transactionControl(s); !ok {
			t.Errorf("%q allowed, want refused", s)
		}
	}
	for _, s := range allowed {
		if what, ok := transactionControl(s); ok {
			t.Errorf("%q refused as %s, want allowed", s, what)
		}
	}
}

// Whatever the server skips before a statement, a refused statement stays
// refused.
func FuzzTransactionControlPrefix(f *testing.F) {
	f.Add(" ", "COMMIT")
	f.Add("/* x */", "ROLLBACK PREPARED 'g'")
	f.Add(";", "begin")
	f.Add("-- c\n", "PREPARE TRANSACTION 'x'")
	f.Fuzz(func(t *testing.T, junk, stmt string) {
		if _, refused := transactionControl(stmt); !refused {
			return
		}
		// Turn junk into something the lexer skips: whitespace,
		// semicolons, and comments whose text cannot end them early.
		var b strings.Builder
		for i, r := range junk {
			switch i % 4 {
			case 0:
				b.WriteString(" ")
			case 1:
				b.WriteString(";")
			case 2:
				b.WriteString("/*" + strings.NewReplacer("*", "", "/", "").Replace(string(r)) + "*/")
			case 3:
				b.WriteString("--" + strings.NewReplacer("\n", "", "\r", "").Replace(string(r)) + "\n")
			}
		}
		if _, refused := transactionControl(b.String() + stmt); !refused {
			t.Fatalf("%q allowed after prefix %q", stmt, b.String())
		}
	})
}

// quoteLiteral on its own, against the server: hostile strings read back
// unchanged under both settings of standard_conforming_strings, and as a
// gid they name exactly one prepared transaction.
func TestQuoteLiteralServer(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	ctx := testCtx(t)
	c := raw(t, db)
	hostile := []string{
		"plain", "", "'", "''", `\`, `\'`, `'\`, `\\'`, "'; COMMIT; --", `\'; COMMIT; --`,
		"E'x'", "$$", "$tag$", "日本語 ünïcödé 🙂", "a\nb\tc", `"quoted"`, "x' OR '1'='1", strings.Repeat(`'\`, 40),
	}
	for _, scs := range []string{"on", "off"} {
		if _, err := c.Exec(ctx, "SET standard_conforming_strings = "+scs); err != nil {
			t.Fatal(err)
		}
		for _, s := range hostile {
			var got string
			// The simple protocol sends the literal as text, as the XA
			// statements do.
			mrr := c.PgConn().Exec(ctx, "SELECT "+quoteLiteral(s))
			res, err := mrr.ReadAll()
			if err != nil {
				t.Fatalf("scs=%s %q: %v", scs, s, err)
			}
			if len(res) != 1 || len(res[0].Rows) != 1 {
				t.Fatalf("scs=%s %q: %d results", scs, s, len(res))
			}
			got = string(res[0].Rows[0][0])
			if got != s {
				t.Errorf("scs=%s: %q read back as %q", scs, s, got)
			}
		}
	}
	if _, err := c.Exec(ctx, "SET standard_conforming_strings = on"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "CREATE TABLE kv (k INT PRIMARY KEY, v INT NOT NULL)")
	for i, gid := range []string{"'; COMMIT PREPARED 'x'; --", `\'; ROLLBACK; --`, "ünï'\\cödé"} {
		lit := quoteLiteral(gid)
		res, err := c.PgConn().Exec(ctx, "BEGIN; INSERT INTO kv VALUES ("+string(rune('1'+i))+", 0); PREPARE TRANSACTION "+lit).ReadAll()
		if err != nil {
			t.Fatalf("prepare %q: %v", gid, err)
		}
		if tag := lastTag(res); tag != "PREPARE TRANSACTION" {
			t.Fatalf("prepare %q: tag %q", gid, tag)
		}
		if !listed(t, db, gid) {
			t.Fatalf("gid %q not in pg_prepared_xacts", gid)
		}
		if _, err := c.PgConn().Exec(ctx, "ROLLBACK PREPARED "+lit).ReadAll(); err != nil {
			t.Fatalf("rollback prepared %q: %v", gid, err)
		}
	}
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d prepared transactions left, %v", n, err)
	}
}

func TestWriteTag(t *testing.T) {
	for tag, want := range map[string]bool{
		"INSERT 0 1": true, "INSERT 0 0": false, "UPDATE 3": true, "UPDATE 0": false, "DELETE 1": true, "DELETE 0": false,
		"MERGE 2": true, "MERGE 0": false, "COPY 5": true, "COPY 0": false,
		"CREATE TABLE": true, "ALTER TABLE": true, "DROP INDEX": true, "TRUNCATE TABLE": true, "GRANT": true,
		"SELECT 1": false, "SELECT 0": false, "SET": false, "SAVEPOINT": false, "ROLLBACK": false, "DO": false, "CALL": false,
		"LOCK TABLE": false, "": false,
	} {
		if got := writeTag(pgconn.NewCommandTag(tag)); got != want {
			t.Errorf("writeTag(%q) = %v, want %v", tag, got, want)
		}
	}
}
