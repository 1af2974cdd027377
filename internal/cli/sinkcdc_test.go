package cli_test

import (
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestSinkDebezium runs `xactl sink run` with format: debezium over a file
// of Debezium change events (a MySQL source, the JSON converter without
// schema) into an upsert table in MariaDB and PostgreSQL: snapshot reads,
// creates, updates, deletes, a re-create; the tables end as the source's
// last state per key, and a second run changes nothing (issue 18, item 4).
func TestSinkDebezium(t *testing.T) {
	e := newSinkEnv(t)
	ddl := "CREATE TABLE customers (id INT PRIMARY KEY, email VARCHAR(100), name VARCHAR(100))"
	if err := e.my.Server.Exec(e.ctx, e.my.Name, ddl); err != nil {
		t.Fatal(err)
	}
	if err := e.pg.Server.Exec(e.ctx, e.pg.Name, ddl); err != nil {
		t.Fatal(err)
	}
	n := 0
	ev := func(op string, id int, before, after string) string {
		n++
		src := fmt.Sprintf(`{"version":"2.5.0.Final","connector":"mysql","name":"dbserver1","ts_ms":%d,"snapshot":"false","db":"inventory","sequence":null,"table":"customers","server_id":223344,"gtid":null,"file":"mysql-bin.000003","pos":%d,"row":0,"thread":7,"query":null}`, 1700000000000+n, 484+300*n)
		return fmt.Sprintf(`{"before":%s,"after":%s,"source":%s,"op":"%s","ts_ms":%d,"transaction":null}`, before, after, src, op, 1700000000100+n)
	}
	row := func(id int, email, name string) string {
		return fmt.Sprintf(`{"id":%d,"email":%q,"first_name":%q}`, id, email, name)
	}
	lines := []string{
		ev("r", 1001, "null", row(1001, "sally@x", "Sally")),
		ev("r", 1002, "null", row(1002, "george@x", "George")),
		ev("c", 1003, "null", row(1003, "ed@x", "Edward")),
		ev("u", 1001, row(1001, "sally@x", "Sally"), row(1001, "sally@y", "Sally")),
		ev("d", 1002, row(1002, "george@x", "George"), "null"),
		ev("c", 1002, "null", row(1002, "george@y", "George")),
		ev("d", 1003, row(1003, "ed@x", "Edward"), "null"),
	}
	path := e.dir + "/customers.ndjson"
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(e.configText("10m"))
	fmt.Fprintf(&b, "sinks:\n  - name: %s\n    format: debezium\n    source:\n      kind: file\n      paths: [%s]\n", e.name, strconv.Quote(path))
	fmt.Fprintf(&b, "    targets: [%s, %s]\n    tables:\n", myName, pgName)
	for _, tg := range []string{myName, pgName} {
		fmt.Fprintf(&b, "      - target: %s\n        name: customers\n        columns: {id: $.id, email: $.email, name: $.first_name}\n        mode: upsert\n        key: [id]\n", tg)
	}
	cfg := e.writeConfig("cdc.yaml", b.String())
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)
	want := []string{"1001 sally@y Sally", "1002 george@y George"}
	for i := range 2 {
		e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0").want(t, 0)
		my, pg := e.customers()
		if !slices.Equal(my, want) || !slices.Equal(pg, want) {
			t.Fatalf("run %d: MariaDB holds %q, PostgreSQL %q; want %q", i+1, my, pg, want)
		}
	}
}

// customers returns both databases' customers rows as "id email name".
func (e *sinkEnv) customers() (my, pg []string) {
	e.t.Helper()
	const q = "SELECT id, email, name FROM customers ORDER BY id"
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	rs, err := db.QueryContext(e.ctx, q)
	if err != nil {
		e.t.Fatal(err)
	}
	for rs.Next() {
		var id int
		var email, name string
		if err := rs.Scan(&id, &email, &name); err != nil {
			e.t.Fatal(err)
		}
		my = append(my, fmt.Sprint(id, " ", email, " ", name))
	}
	if err := rs.Err(); err != nil {
		e.t.Fatal(err)
	}
	c := e.pgConn()
	defer c.Close(e.ctx)
	prs, err := c.Query(e.ctx, q)
	if err != nil {
		e.t.Fatal(err)
	}
	for prs.Next() {
		var id int
		var email, name string
		if err := prs.Scan(&id, &email, &name); err != nil {
			e.t.Fatal(err)
		}
		pg = append(pg, fmt.Sprint(id, " ", email, " ", name))
	}
	if err := prs.Err(); err != nil {
		e.t.Fatal(err)
	}
	return my, pg
}
