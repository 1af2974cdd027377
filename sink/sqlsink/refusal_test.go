package sqlsink_test

import (
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/filesource"
	"github.com/xadb/xa/sink/sqlsink"
)

// refusalFiles are two partitions whose records 2, 4, 7 and 8 a database
// refuses: a string too long for varchar(5), a JSON null for a NOT NULL
// column, 100000 for a smallint (out of range; on PostgreSQL pgx cannot
// encode it), a CHECK violated. refusedNames are what each refusal's error
// must name.
var (
	refusalFiles = [][]string{
		{`{"id": 1, "v": "one", "n": 1}`, `{"id": 2, "v": "much too long", "n": 2}`, `{"id": 3, "v": "three", "n": 3}`,
			`{"id": 4, "v": null, "n": 4}`, `{"id": 5, "v": "five", "n": 5}`},
		{`{"id": 6, "v": "six", "n": 6}`, `{"id": 7, "v": "seven", "n": 100000}`, `{"id": 8, "v": "eight", "n": -8}`,
			`{"id": 9, "v": "nine", "n": 9}`},
	}
	refusedNames = map[int]string{2: "column v", 4: "column v", 7: "column n", 8: "constraint n_positive"}
	goodIDs      = []int64{1, 3, 5, 6, 9}
)

// strictRows creates the table strict_rows on target tg of e.
func (e *env) strictRows(tg string) {
	e.t.Helper()
	ctx := testCtx(e.t)
	var err error
	if tg == tgMy {
		err = e.my.Server.Exec(ctx, e.my.Name, "CREATE TABLE strict_rows (id BIGINT AUTO_INCREMENT PRIMARY KEY, k BIGINT NOT NULL, v VARCHAR(5) NOT NULL, n SMALLINT, CONSTRAINT n_positive CHECK (n >= 0))")
	} else {
		err = e.pg.Server.Exec(ctx, e.pg.Name, "CREATE TABLE strict_rows (id bigserial PRIMARY KEY, k bigint NOT NULL, v varchar(5) NOT NULL, n smallint, CONSTRAINT n_positive CHECK (n >= 0))")
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// keys returns the k column of table on target tg, sorted.
func (e *env) keys(tg, table string) []int64 {
	e.t.Helper()
	ctx := testCtx(e.t)
	var out []int64
	q := "SELECT k FROM " + table + " ORDER BY k"
	if tg == tgMy {
		db, err := sql.Open("mysql", e.my.DSN())
		if err != nil {
			e.t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			e.t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k int64
			if err := rows.Scan(&k); err != nil {
				e.t.Fatal(err)
			}
			out = append(out, k)
		}
		if err := rows.Err(); err != nil {
			e.t.Fatal(err)
		}
		return out
	}
	c, err := pgxConnect(ctx, e.pg.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, q)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestRefusedRows: rows that the target database refuses (too long, NOT
// NULL, out of range, CHECK) are narrowed to their records (issue 18,
// item 2). With on_error stop the run stops with a *RefusedError naming
// the record's partition and position and the column (or constraint), and
// nothing lands. With dead_letter the good records land once each, the
// refused ones are dead letters once each, their error naming the record
// and the column; a second run over the same files writes nothing more.
// "whole": each record also maps to a row of the other target's events
// table, which the database accepts: a refused record's row there must
// not land either (the checkpoint is read again with the record set
// aside). Run with each database as the refusing target (and progress).
func TestRefusedRows(t *testing.T) {
	t.Parallel()
	for _, tg := range []string{tgMy, tgPg} {
		for _, whole := range []bool{false, true} {
			t.Run(fmt.Sprintf("target=%s/whole=%v", tg, whole), func(t *testing.T) {
				t.Parallel()
				testRefusedRows(t, tg, whole)
			})
		}
	}
}

func testRefusedRows(t *testing.T, tg string, whole bool) {
	e := newEnvOn(t, tg)
	e.strictRows(tg)
	ctx := testCtx(t)
	dir := t.TempDir()
	var files []string
	bad := map[string]int{} // partition@position -> id
	for i, lines := range refusalFiles {
		path := filepath.Join(dir, fmt.Sprintf("%c.ndjson", 'a'+i))
		files = append(files, path)
		pos := 0
		for _, l := range lines {
			pos += len(l) + 1
			var id int
			fmt.Sscanf(l, `{"id": %d`, &id)
			if refusedNames[id] != "" {
				bad[fmt.Sprintf("%s@%d", path, pos)] = id
			}
		}
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	other := tgPg
	if tg == tgPg {
		other = tgMy
	}
	e.cfg.Tables = []sqlsink.Table{{ID: "rows", Target: tg, Name: "strict_rows",
		Columns: []sqlsink.Column{{Name: "k", From: "$.id"}, {Name: "v", From: "$.v"}, {Name: "n", From: "$.n"}}}}
	if whole {
		e.cfg.Tables = append(e.cfg.Tables, sqlsink.Table{ID: "events", Target: other, Name: "events",
			Columns: []sqlsink.Column{{Name: "k", From: "$.id"}, {Name: "p", From: "partition"}, {Name: "pos", From: "position"}, {Name: "v", From: "$.v"}}})
	}
	run := func(onError sqlsink.OnError) error {
		t.Helper()
		e.cfg.OnError = onError
		src, err := filesource.New(filesource.Config{Files: files})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		s := e.open()
		defer s.Close()
		opts := runOpts()
		opts.MaxAborts = 1
		if whole {
			opts.MaxAborts = 3 // one abort sets the refused records aside
		}
		return s.Run(ctx, src, opts)
	}
	landed := func() []int64 {
		t.Helper()
		got := e.keys(tg, "strict_rows")
		if whole {
			if o := e.keys(other, "events"); !slices.Equal(o, got) {
				t.Fatalf("%s.events holds %v, %s.strict_rows %v: a record landed in part", other, o, tg, got)
			}
		}
		return got
	}

	// Stop (the default): the run stops naming a refused record and its
	// column; nothing lands.
	err := run("")
	var re *sqlsink.RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("on_error stop: %v; want a *RefusedError", err)
	}
	t.Logf("on_error stop: %v", err)
	id, ok := bad[re.Partition+"@"+re.Position]
	if !ok {
		t.Fatalf("on_error stop: the refusal names %s@%s; want one of the refused records %v", re.Partition, re.Position, bad)
	}
	if !strings.Contains(err.Error(), refusedNames[id]) || re.Table != "strict_rows" || re.Target != tg {
		t.Fatalf("on_error stop: %v (table %s on %s); want it to name %s of strict_rows on %s", err, re.Table, re.Target, refusedNames[id], tg)
	}
	if got := landed(); len(got) != 0 {
		t.Fatalf("on_error stop: %v landed; want nothing", got)
	}

	// Dead letters, twice: the good records land once, the refused ones
	// are dead letters once.
	for range 2 {
		if err := run(sqlsink.OnErrorDeadLetter); err != nil {
			t.Fatal(err)
		}
		if got := landed(); !slices.Equal(got, goodIDs) {
			t.Fatalf("strict_rows holds %v; want %v once each", got, goodIDs)
		}
		dl, err := sqlsink.ReadDeadLetters(ctx, e.progress(), e.name, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, d := range dl {
			at := d.Partition + "@" + d.Position
			id, ok := bad[at]
			if !ok || seen[at] {
				t.Fatalf("dead letter %s (%s): not a refused record, or twice", at, d.Error)
			}
			seen[at] = true
			if !strings.Contains(d.Error, refusedNames[id]) || !strings.Contains(d.Error, d.Partition+" before position "+d.Position) ||
				!strings.Contains(string(d.Value), fmt.Sprintf(`"id": %d`, id)) {
				t.Fatalf("dead letter %s holds %q, error %q; want record %d, its partition, position and %s", at, d.Value, d.Error, id, refusedNames[id])
			}
		}
		if len(seen) != len(bad) {
			t.Fatalf("%d dead letters; want the %d refused records", len(seen), len(bad))
		}
		for _, d := range dl {
			t.Logf("dead letter: %s", d.Error)
		}
	}
}

// TestRefusalDroppedTable: a table dropped under a running sink is not a
// bad record: with on_error dead_letter the checkpoint fails naming the
// table, and no record is set aside (issue 18, item 2).
func TestRefusalDroppedTable(t *testing.T) {
	t.Parallel()
	for _, tg := range []string{tgMy, tgPg} {
		t.Run("target="+tg, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, tg)
			e.strictRows(tg)
			ctx := testCtx(t)
			e.cfg.Tables = []sqlsink.Table{{ID: "rows", Target: tg, Name: "strict_rows",
				Columns: []sqlsink.Column{{Name: "k", From: "$.id"}, {Name: "v", From: "$.v"}, {Name: "n", From: "$.n"}}}}
			e.cfg.OnError = sqlsink.OnErrorDeadLetter
			s := e.open()
			x, err := s.External(ctx, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := x.Restore(ctx, nil, 0); err != nil {
				t.Fatal(err)
			}
			db := e.my
			if tg == tgPg {
				db = e.pg
			}
			if err := db.Server.Exec(ctx, db.Name, "DROP TABLE strict_rows"); err != nil {
				t.Fatal(err)
			}
			var recs []sink.Record
			for i, l := range refusalFiles[0] {
				recs = append(recs, sink.Record{Partition: "p", Next: fmt.Sprint(i + 1), Value: []byte(l)})
			}
			err = x.Write(ctx, recs)
			if err == nil {
				_, err = x.PreCommit(ctx, 1)
			}
			var re *sqlsink.RefusedError
			if err == nil || errors.As(err, &re) || errors.Is(err, sqlsink.ErrTooManyDeadLetters) || !strings.Contains(err.Error(), "strict_rows") {
				t.Fatalf("writing to a dropped table: %v; want an error naming the table, not a refusal", err)
			}
			t.Logf("dropped table: %v", err)
			if dl, err := sqlsink.ReadDeadLetters(ctx, e.progress(), e.name, 0); err != nil || len(dl) != 0 {
				t.Fatalf("dead letters: %+v, %v; want none", dl, err)
			}
		})
	}
}

// TestRefusedUpsert: in an upsert table, a refused record whose row
// replaced another record's row of the same key (the buffer keeps a key's
// last row) is set aside whole, and the key ends in the earlier record's
// state: the checkpoint is read again with the refused record set aside,
// so the earlier record's row is written (issue 18, item 2). Each
// database as the target.
func TestRefusedUpsert(t *testing.T) {
	t.Parallel()
	for _, tg := range []string{tgMy, tgPg} {
		t.Run("target="+tg, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, tg)
			ctx := testCtx(t)
			db := e.my
			if tg == tgPg {
				db = e.pg
			}
			if err := db.Server.Exec(ctx, db.Name, "CREATE TABLE strict_latest (k BIGINT PRIMARY KEY, v VARCHAR(5) NOT NULL, n SMALLINT)"); err != nil {
				t.Fatal(err)
			}
			lines := []string{`{"id": 1, "v": "one"}`, `{"id": 2, "v": "two"}`, `{"id": 1, "v": "much too long"}`, `{"id": 3, "v": "three"}`,
				`{"id": 4, "v": "four", "n": 100000}`}
			path := filepath.Join(t.TempDir(), "a.ndjson")
			if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			badAt := fmt.Sprint(len(lines[0]) + len(lines[1]) + len(lines[2]) + 3)
			e.cfg.Tables = []sqlsink.Table{{ID: "latest", Target: tg, Name: "strict_latest", Upsert: true, Key: []string{"k"},
				Columns: []sqlsink.Column{{Name: "k", From: "$.id"}, {Name: "v", From: "$.v"}, {Name: "n", From: "$.n"}}}}
			e.cfg.OnError = sqlsink.OnErrorDeadLetter
			src, err := filesource.New(filesource.Config{Files: []string{path}})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			s := e.open()
			opts := runOpts()
			opts.MaxAborts = 3
			if err := s.Run(ctx, src, opts); err != nil {
				t.Fatal(err)
			}
			got := map[int64]string{}
			q := "SELECT k, v FROM strict_latest"
			if tg == tgMy {
				sdb, err := sql.Open("mysql", e.my.DSN())
				if err != nil {
					t.Fatal(err)
				}
				defer sdb.Close()
				rows, err := sdb.QueryContext(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var k int64
					var v string
					if err := rows.Scan(&k, &v); err != nil {
						t.Fatal(err)
					}
					got[k] = v
				}
				rows.Close()
			} else {
				c, err := pgxConnect(ctx, e.pg.DSN())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(ctx)
				rows, err := c.Query(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var k int64
					var v string
					if err := rows.Scan(&k, &v); err != nil {
						t.Fatal(err)
					}
					got[k] = v
				}
				rows.Close()
			}
			if want := map[int64]string{1: "one", 2: "two", 3: "three"}; !maps.Equal(got, want) {
				t.Fatalf("strict_latest holds %v; want %v (key 1 in its first record's state)", got, want)
			}
			dl, err := sqlsink.ReadDeadLetters(ctx, e.progress(), e.name, 0)
			if err != nil {
				t.Fatal(err)
			}
			// PostgreSQL's 22001 from an INSERT carries no column (COPY's
			// context does): the column is named on MariaDB only.
			want := "column v"
			if tg == tgPg {
				want = "value too long"
			}
			if len(dl) != 2 || dl[0].Position != badAt || !strings.Contains(dl[0].Error, "before position "+badAt) || !strings.Contains(dl[0].Error, want) {
				t.Fatalf("dead letters %+v; want the record before position %s, once, naming %q, then record 4", dl, badAt, want)
			}
			// A value out of range for a smallint: pgx cannot encode it
			// for PostgreSQL's statement, MariaDB refuses it (1264).
			if !strings.Contains(string(dl[1].Value), `"id": 4`) || !strings.Contains(dl[1].Error, "column n") {
				t.Fatalf("dead letter %s: %s; want record 4, naming column n", dl[1].Value, dl[1].Error)
			}
			for _, d := range dl {
				t.Logf("dead letter: %s", d.Error)
			}
		})
	}
}
