package cli_test

import (
	"database/sql"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestSinkReplay: xactl sink replay end to end (issue 18, item 2). xactl
// sink run with on_error: dead_letter sets two lines aside (2.5 for the
// BIGINT seq, and a line that is not JSON); before the fix, a dry run
// keeps both (exit 1) and writes nothing; the operator makes seq a DOUBLE
// in both databases; replaying the fraction by its ID (checkpoint and seq,
// from sink dead-letters) lands its row once in each database and deletes
// its dead letter; replaying it again finds no such dead letter (exit 1);
// --all keeps the line that is still not JSON, with the reason (exit 1).
// No flag, or both, is a usage error (exit 2).
func TestSinkReplay(t *testing.T) {
	e := newSinkEnv(t)
	path := e.dir + "/events.ndjson"
	lines := []string{`{"id": 1, "seq": 1}`, `{"id": 2, "seq": 2.5}`, `not json`, `{"id": 4, "seq": 4}`}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := e.sinkConfig("replay.yaml", "kind: file\npaths: ["+strconv.Quote(path)+"]", "    on_error: dead_letter\n")
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)
	e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0").want(t, 0)
	e.wantRowsOnce(2)

	type deadLetter struct {
		Incarnation uint64 `json:"incarnation"`
		Checkpoint  uint64 `json:"checkpoint"`
		Seq         int64  `json:"seq"`
		Position    string `json:"position"`
		Value       []byte `json:"value"`
	}
	list := func() []deadLetter {
		t.Helper()
		var v struct {
			DeadLetters []deadLetter `json:"dead_letters"`
		}
		e.runWith(cfg, "sink", "dead-letters", e.name, "-o", "json").want(t, 0).json(t, &v)
		return v.DeadLetters
	}
	dl := list()
	if len(dl) != 2 {
		t.Fatalf("dead letters %+v; want 2", dl)
	}
	var fraction deadLetter
	for _, d := range dl {
		if strings.Contains(string(d.Value), "2.5") {
			fraction = d
		}
	}
	t.Logf("sink dead-letters:\n%s", e.runWith(cfg, "sink", "dead-letters", e.name).want(t, 0).stdout)

	e.runWith(cfg, "sink", "replay", e.name).want(t, 2)
	e.runWith(cfg, "sink", "replay", e.name, "--all", "--checkpoint", "1", "--seq", "1").want(t, 2)
	r := e.runWith(cfg, "sink", "replay", e.name, "--all", "--dry-run").want(t, 1)
	r.stdoutHas(t, "not an integer", "not JSON", "Dry run: 0 dead letters would be replayed, 2 dead letters kept")
	t.Logf("dry run before the fix:\n%s", r.stdout)
	e.wantRowsOnce(2)

	// The fix: seq takes fractions.
	for _, db := range []struct {
		exec func(string) error
		ddl  string
	}{
		{func(q string) error { return e.my.Server.Exec(e.ctx, e.my.Name, q) }, "ALTER TABLE events MODIFY seq DOUBLE"},
		{func(q string) error { return e.pg.Server.Exec(e.ctx, e.pg.Name, q) }, "ALTER TABLE events ALTER COLUMN seq TYPE double precision"},
	} {
		if err := db.exec(db.ddl); err != nil {
			t.Fatal(err)
		}
	}
	id := []string{"--checkpoint", strconv.FormatUint(fraction.Checkpoint, 10), "--seq", strconv.FormatInt(fraction.Seq, 10)}
	r = e.runWith(cfg, append([]string{"sink", "replay", e.name, "-o", "json"}, id...)...).want(t, 0)
	var v struct {
		Replayed int `json:"replayed"`
		Kept     int `json:"kept"`
		Results  []struct {
			Outcome string `json:"outcome"`
			Rows    int    `json:"rows"`
		} `json:"results"`
	}
	r.json(t, &v)
	if v.Replayed != 1 || v.Kept != 0 || len(v.Results) != 1 || v.Results[0].Outcome != "replayed" || v.Results[0].Rows != 2 {
		t.Errorf("sink replay %v: %s; want the fraction replayed, 2 rows", id, r)
	}
	e.wantRowsOnce(3)
	var n int
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRowContext(e.ctx, "SELECT COUNT(*) FROM events WHERE id = 2 AND seq = 2.5").Scan(&n); err != nil || n != 1 {
		t.Errorf("MariaDB holds the replayed row %d times (%v); want once", n, err)
	}
	if n := e.countOn(e.pg, "SELECT COUNT(*) FROM events WHERE id = 2 AND seq = 2.5"); n != 1 {
		t.Errorf("PostgreSQL holds the replayed row %d times; want once", n)
	}
	if dl := list(); len(dl) != 1 || string(dl[0].Value) != "not json" {
		t.Errorf("dead letters after the replay: %+v; want the line that is not JSON only", dl)
	}
	r = e.runWith(cfg, append([]string{"sink", "replay", e.name}, id...)...).want(t, 1)
	r.stderrHas(t, "no dead letter")
	r = e.runWith(cfg, "sink", "replay", e.name, "--all").want(t, 1)
	r.stdoutHas(t, "kept", "not JSON", "0 dead letters replayed")
	r.stderrHas(t, "1 dead letter kept")
	t.Logf("sink replay --all:\n%s%s", r.stdout, r.stderr)
	e.wantRowsOnce(3)
}
