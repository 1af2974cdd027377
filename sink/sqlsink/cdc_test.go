package sqlsink_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/sqlsink"
)

// sliceSource is one partition of given records (key, value; a nil value
// is a tombstone), polled poll at a time; its positions are record
// counts. It stands for a Kafka topic of one partition.
type sliceSource struct {
	part  string
	recs  []sink.Record
	poll  int
	h     sink.Handler
	next  int
	taken bool
}

func newSliceSource(part string, kv [][2][]byte, poll int) *sliceSource {
	s := &sliceSource{part: part, poll: poll}
	for i, r := range kv {
		s.recs = append(s.recs, sink.Record{Partition: part, Next: strconv.Itoa(i + 1), Key: r[0], Value: r[1],
			Time: time.Unix(1700000000+int64(i), 0).UTC()})
	}
	return s
}

func (s *sliceSource) Start(ctx context.Context, h sink.Handler) error { s.h = h; return nil }

func (s *sliceSource) Poll(ctx context.Context) ([]sink.Record, error) {
	if !s.taken {
		pos, err := s.h.Assigned(ctx, []string{s.part})
		if err != nil {
			return nil, err
		}
		s.taken = true
		if err := s.Seek(ctx, pos); err != nil {
			return nil, err
		}
	}
	if s.next >= len(s.recs) {
		return nil, io.EOF
	}
	n := min(s.poll, len(s.recs)-s.next)
	out := slices.Clone(s.recs[s.next : s.next+n])
	s.next += n
	return out, nil
}

func (s *sliceSource) Seek(ctx context.Context, positions map[string]string) error {
	p, ok := positions[s.part]
	if !ok {
		return nil
	}
	s.next = 0
	if p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return err
		}
		s.next = n
	}
	return nil
}

func (s *sliceSource) Committed(context.Context, map[string]string) error { return nil }
func (s *sliceSource) Close() error                                       { return nil }

// cdcEnv is env with the table customers (id, email, name) in both
// databases, written as an upsert table by id.
func cdcEnv(t *testing.T, format string, cols []sqlsink.Column, key string, keyType [2]string) *env {
	t.Helper()
	e := newEnv(t)
	ctx := testCtx(t)
	if err := e.my.Server.Exec(ctx, e.my.Name,
		"CREATE TABLE customers (id "+keyType[0]+" PRIMARY KEY, email VARCHAR(100), name VARCHAR(100))"); err != nil {
		t.Fatal(err)
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name,
		"CREATE TABLE customers (id "+keyType[1]+" PRIMARY KEY, email varchar(100), name varchar(100))"); err != nil {
		t.Fatal(err)
	}
	e.cfg.Format = format
	e.cfg.Tables = []sqlsink.Table{
		{ID: "my.customers", Target: tgMy, Name: "customers", Columns: cols, Upsert: true, Key: []string{key}},
		{ID: "pg.customers", Target: tgPg, Name: "customers", Columns: cols, Upsert: true, Key: []string{key}},
	}
	return e
}

// customers returns what both databases' customers tables hold, as
// "id email name" lines ordered by id.
func (e *env) customers() (my, pg []string) {
	e.t.Helper()
	ctx := testCtx(e.t)
	const q = "SELECT id, COALESCE(email, '-'), COALESCE(name, '-') FROM customers ORDER BY id"
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	rs, err := db.QueryContext(ctx, q)
	if err != nil {
		e.t.Fatal(err)
	}
	for rs.Next() {
		var id, email, name string
		if err := rs.Scan(&id, &email, &name); err != nil {
			e.t.Fatal(err)
		}
		my = append(my, id+" "+email+" "+name)
	}
	if err := rs.Err(); err != nil {
		e.t.Fatal(err)
	}
	c, err := pgxConnect(ctx, e.pg.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close(ctx)
	prs, err := c.Query(ctx, "SELECT id::text, COALESCE(email, '-'), COALESCE(name, '-') FROM customers ORDER BY id")
	if err != nil {
		e.t.Fatal(err)
	}
	for prs.Next() {
		var id, email, name string
		if err := prs.Scan(&id, &email, &name); err != nil {
			e.t.Fatal(err)
		}
		pg = append(pg, id+" "+email+" "+name)
	}
	if err := prs.Err(); err != nil {
		e.t.Fatal(err)
	}
	return my, pg
}

// runRecords runs the sink over recs (the first n of them), with
// checkpoints of cpRecords records and polls of poll records.
func (e *env) runRecords(recs [][2][]byte, n, cpRecords, poll int) {
	e.t.Helper()
	s := e.open()
	opts := runOpts()
	opts.CheckpointRecords = cpRecords
	opts.MaxAborts = 1
	if err := s.Run(testCtx(e.t), newSliceSource("cdc/0", recs[:n], poll), opts); err != nil {
		e.t.Fatal(err)
	}
	s.Close()
}

// checkCustomers fails unless both databases hold want.
func (e *env) checkCustomers(when string, want []string) {
	e.t.Helper()
	my, pg := e.customers()
	if !slices.Equal(my, want) || !slices.Equal(pg, want) {
		e.t.Fatalf("%s: %s holds %q, %s holds %q; want %q", when, tgMy, my, tgPg, pg, want)
	}
}

// TestTombstones: on an upsert table keyed by the record's key, a record
// whose value is null (a Kafka tombstone) deletes the key's row, in
// source order with the key's other records, within one checkpoint
// (checkpoints of 1000 records) and across checkpoints (of 1 record); a
// tombstone of a key without a row changes nothing; a second run
// (restart) over the same records changes nothing, and a restart after
// the first half lands the rest exactly once (issue 18, item 4).
func TestTombstones(t *testing.T) {
	t.Parallel()
	recs := [][2][]byte{
		{[]byte("a"), []byte(`{"email": "a1@x", "name": "A"}`)},
		{[]byte("b"), []byte(`{"email": "b1@x", "name": "B"}`)},
		{[]byte("a"), nil}, // delete a
		{[]byte("c"), []byte(`{"email": "c1@x", "name": "C"}`)},
		{[]byte("a"), []byte(`{"email": "a2@x", "name": "A again"}`)}, // re-create a
		{[]byte("b"), []byte(`{"email": "b2@x", "name": "B"}`)},
		{[]byte("b"), nil}, // delete b
		{[]byte("z"), nil}, // a key that never had a row
		{[]byte("c"), nil},
		{[]byte("c"), nil}, // twice
		{[]byte("d"), []byte(`{"email": "d1@x", "name": "D"}`)},
	}
	want := []string{"a a2@x A again", "d d1@x D"}
	cols := []sqlsink.Column{{Name: "id", From: "key"}, {Name: "email", From: "$.email"}, {Name: "name", From: "$.name"}}
	for _, cp := range []int{1000, 1} {
		t.Run(fmt.Sprintf("checkpoint=%d", cp), func(t *testing.T) {
			t.Parallel()
			e := cdcEnv(t, "", cols, "id", [2]string{"VARCHAR(64)", "varchar(64)"})
			e.runRecords(recs, 5, cp, 3)
			e.checkCustomers("after 5 records", []string{"a a2@x A again", "b b1@x B", "c c1@x C"})
			e.runRecords(recs, len(recs), cp, 3)
			e.checkCustomers("after all records", want)
			e.runRecords(recs, len(recs), cp, 3)
			e.checkCustomers("after a second run", want)
		})
	}
}

// TestTombstoneRefused: a tombstone for a table that cannot delete by the
// record's key (an insert table, or an upsert table keyed by a JSON path)
// is a bad record, not a silent no-op; so is a tombstone without a key.
func TestTombstoneRefused(t *testing.T) {
	cases := []struct {
		name string
		tb   sqlsink.Table
		key  []byte
		want string
	}{
		{"insert table", sqlsink.Table{Name: "t", Columns: []sqlsink.Column{{Name: "k", From: "key"}}}, []byte("a"), "not an upsert table"},
		{"keyed by a path", sqlsink.Table{Name: "t", Columns: []sqlsink.Column{{Name: "k", From: "$.id"}}, Upsert: true, Key: []string{"k"}}, []byte("a"), "not from the record's key"},
		{"no key", sqlsink.Table{Name: "t", Columns: []sqlsink.Column{{Name: "k", From: "key"}}, Upsert: true, Key: []string{"k"}}, nil, "without a key"},
	}
	for _, c := range cases {
		f, err := sqlsink.JSONMapping([]sqlsink.Table{c.tb})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := f(sink.Record{Key: c.key})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, %v; want an error saying %q", c.name, rows, err, c.want)
		}
	}
	f, err := sqlsink.JSONMapping([]sqlsink.Table{{Name: "t", Columns: []sqlsink.Column{{Name: "k", From: "key"}, {Name: "v", From: "$.v"}}, Upsert: true, Key: []string{"k"}}})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := f(sink.Record{Key: []byte("a")})
	if err != nil || len(rows) != 1 || !rows[0].Delete || rows[0].Values[0] != "a" {
		t.Fatalf("a tombstone: %+v, %v; want a delete of key a", rows, err)
	}
}

// debeziumSource shapes change events of the table inventory.customers
// (id, email, first_name) as Debezium's MySQL or PostgreSQL connector
// emits them with Kafka's JSON converter: the envelope alone
// (schemas.enable=false) or inside {"schema":…, "payload":…}. MySQL
// (binlog_row_image=FULL) has the whole "before" row on updates and
// deletes; PostgreSQL with REPLICA IDENTITY DEFAULT has no "before" on
// updates and only the primary key in a delete's "before".
type debeziumSource struct {
	connector string // mysql or postgresql
	schema    bool
	n         int
}

func (d *debeziumSource) source() map[string]any {
	d.n++
	ts := 1700000000000 + int64(d.n)
	if d.connector == "mysql" {
		return map[string]any{"version": "2.5.0.Final", "connector": "mysql", "name": "dbserver1", "ts_ms": ts,
			"snapshot": "false", "db": "inventory", "sequence": nil, "table": "customers", "server_id": 223344,
			"gtid": nil, "file": "mysql-bin.000003", "pos": 484 + d.n*300, "row": 0, "thread": 7, "query": nil}
	}
	return map[string]any{"version": "2.5.0.Final", "connector": "postgresql", "name": "PostgreSQL_server", "ts_ms": ts,
		"snapshot": "false", "db": "postgres", "sequence": fmt.Sprintf(`["24023119","%d"]`, 24023128+d.n*8),
		"schema": "public", "table": "customers", "txId": 555 + d.n, "lsn": 24023128 + d.n*8, "xmin": nil}
}

func row(id int, email, name string) map[string]any {
	return map[string]any{"id": id, "email": email, "first_name": name}
}

// event returns a change event's key and value.
func (d *debeziumSource) event(op string, id int, before, after map[string]any) [2][]byte {
	if d.connector == "postgresql" {
		switch op {
		case "u":
			before = nil
		case "d":
			before = map[string]any{"id": id, "email": nil, "first_name": nil}
		}
	}
	env := map[string]any{"before": before, "after": after, "source": d.source(), "op": op,
		"ts_ms": 1700000000100 + int64(d.n), "transaction": nil}
	key := map[string]any{"id": id}
	if d.schema {
		field := func(name, typ string, optional bool) map[string]any {
			return map[string]any{"type": typ, "optional": optional, "field": name}
		}
		rowSchema := func(name string) map[string]any {
			return map[string]any{"type": "struct", "optional": true, "field": name, "name": "dbserver1.inventory.customers.Value",
				"fields": []any{field("id", "int32", false), field("email", "string", false), field("first_name", "string", false)}}
		}
		env = map[string]any{"schema": map[string]any{"type": "struct", "optional": false, "name": "dbserver1.inventory.customers.Envelope",
			"fields": []any{rowSchema("before"), rowSchema("after"), map[string]any{"type": "struct", "field": "source", "optional": false},
				field("op", "string", false), field("ts_ms", "int64", true)}}, "payload": env}
		key = map[string]any{"schema": map[string]any{"type": "struct", "optional": false, "name": "dbserver1.inventory.customers.Key",
			"fields": []any{field("id", "int32", false)}}, "payload": key}
	}
	return [2][]byte{mustJSON(key), mustJSON(env)}
}

func (d *debeziumSource) tombstone(id int) [2][]byte {
	key := map[string]any{"id": id}
	if d.schema {
		key = map[string]any{"schema": map[string]any{"type": "struct", "name": "dbserver1.inventory.customers.Key",
			"fields": []any{map[string]any{"type": "int32", "optional": false, "field": "id"}}}, "payload": key}
	}
	return [2][]byte{mustJSON(key), nil}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestDebezium: format debezium applies Debezium change events of a MySQL
// and of a PostgreSQL source, with and without the schema, to an upsert
// table in MariaDB and in PostgreSQL: per key a snapshot read or create,
// updates, a delete and its tombstone, a re-create; the tables end as the
// source's last state of each key, within one checkpoint (1000 records)
// and across checkpoints (1 record); a restart after the first half lands
// the rest, and a second run changes nothing (issue 18, item 4).
func TestDebezium(t *testing.T) {
	t.Parallel()
	type variant struct {
		connector string
		schema    bool
		cp        int
	}
	var vs []variant
	for _, c := range []string{"mysql", "postgresql"} {
		vs = append(vs, variant{c, c == "postgresql", 1000}, variant{c, c == "mysql", 1})
	}
	cols := []sqlsink.Column{{Name: "id", From: "$.id"}, {Name: "email", From: "$.email"}, {Name: "name", From: "$.first_name"}}
	for _, v := range vs {
		t.Run(fmt.Sprintf("source=%s/schema=%v/checkpoint=%d", v.connector, v.schema, v.cp), func(t *testing.T) {
			t.Parallel()
			d := &debeziumSource{connector: v.connector, schema: v.schema}
			r1, r2, r3 := row(1001, "sally@x", "Sally"), row(1002, "george@x", "George"), row(1003, "ed@x", "Edward")
			r1b, r2b := row(1001, "sally@y", "Sally"), row(1002, "george@y", "George")
			recs := [][2][]byte{
				d.event("r", 1001, nil, r1), // the snapshot
				d.event("r", 1002, nil, r2),
				d.event("c", 1003, nil, r3),
				d.event("u", 1001, r1, r1b),
				d.event("d", 1002, r2, nil),  // delete 1002 ...
				d.tombstone(1002),            // ... and its tombstone
				d.event("c", 1002, nil, r2b), // re-create
				d.event("d", 1003, r3, nil),
				d.tombstone(1003),
				d.event("c", 1004, nil, row(1004, "anne@x", "Anne")),
				d.event("u", 1004, row(1004, "anne@x", "Anne"), row(1004, "anne@y", "Anne Marie")),
				d.event("d", 1001, r1b, nil),
				d.tombstone(1001),
				d.event("c", 1001, nil, row(1001, "sally@z", "Sally again")),
				d.event("d", 1004, row(1004, "anne@y", "Anne Marie"), nil),
				d.tombstone(1004),
			}
			e := cdcEnv(t, sqlsink.FormatDebezium, cols, "id", [2]string{"INT", "integer"})
			e.runRecords(recs, 7, v.cp, 3)
			e.checkCustomers("after 7 events", []string{"1001 sally@y Sally", "1002 george@y George", "1003 ed@x Edward"})
			want := []string{"1001 sally@z Sally again", "1002 george@y George"}
			e.runRecords(recs, len(recs), v.cp, 3)
			e.checkCustomers("after all events", want)
			e.runRecords(recs, len(recs), v.cp, 3)
			e.checkCustomers("after a second run", want)
		})
	}
}

// TestDebeziumRefused: what format debezium does not apply is a bad
// record with a reason; an insert table is refused when the sink opens.
func TestDebeziumRefused(t *testing.T) {
	tb := sqlsink.Table{Name: "t", Columns: []sqlsink.Column{{Name: "id", From: "$.id"}}, Upsert: true, Key: []string{"id"}}
	f, err := sqlsink.DebeziumMapping([]sqlsink.Table{tb})
	if err != nil {
		t.Fatal(err)
	}
	for value, want := range map[string]string{
		`{"before": null, "after": null, "op": "t", "source": {}}`:     "truncate",
		`{"before": null, "after": {"id": 1}, "source": {}}`:           "no op",
		`{"before": null, "after": null, "op": "d", "source": {}}`:     `without "before"`,
		`{"before": {"x": 1}, "after": null, "op": "d", "source": {}}`: "$.id",
		`{"before": null, "after": null, "op": "c", "source": {}}`:     `without "after"`,
		`[1, 2]`:                       "not a JSON object",
		`{"schema": {}, "payload": 3}`: "payload is not a JSON object",
	} {
		rows, err := f(sink.Record{Value: []byte(value)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, %v; want an error saying %q", value, rows, err, want)
		}
	}
	for _, v := range []string{"", `{"schema": {"type": "struct"}, "payload": null}`} {
		var value []byte
		if v != "" {
			value = []byte(v)
		}
		if rows, err := f(sink.Record{Key: []byte(`{"id": 1}`), Value: value}); err != nil || len(rows) != 0 {
			t.Errorf("tombstone %q: %v, %v; want it skipped", v, rows, err)
		}
	}
	tb.Upsert, tb.Key = false, nil
	if _, err := sqlsink.DebeziumMapping([]sqlsink.Table{tb}); err == nil || !strings.Contains(err.Error(), "upsert") {
		t.Fatalf("an insert table: %v; want it refused", err)
	}
}
