package sqlsink_test

// Findings of an adversarial review of the exactly-once sink: each test
// failed while its bug was there.

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/filesource"
	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/sqlsink"
)

// TestStatementCacheTablesWithoutID: the MySQL writer cached prepared
// multi-row INSERTs per branch by {t.ID, rows} (now by the statement's
// text). Table.ID is
// documented as optional ("default Name"), and the sink keys everything
// else by Table.id(); but the cache used the raw field, so two tables of
// one MySQL target that leave ID empty share the cache: once each has sent
// a batch of n rows, the statement prepared for the second table is reused
// for the first one's next batch of n rows. Here events (INSERT) and
// latest (UPSERT by partition, same column count) sit on MariaDB; the
// events rows of every later batch were upserted into latest instead, and
// no error was raised anywhere (it printed "MariaDB events: 40 rows").
func TestStatementCacheTablesWithoutID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	if err := e.my.Server.Exec(ctx, e.my.Name,
		"CREATE TABLE latest5 (p VARCHAR(64) PRIMARY KEY, k BIGINT NOT NULL, pos VARCHAR(32) NOT NULL, v TEXT, t DATETIME(6))"); err != nil {
		t.Fatal(err)
	}
	cols := e.cfg.Tables[0].Columns // k, p, pos, v, t
	e.cfg.Tables = []sqlsink.Table{
		// No ID: the documented default is Name.
		{Target: tgMy, Name: "events", Columns: cols},
		{Target: tgMy, Name: "latest5", Columns: cols, Upsert: true, Key: []string{"p"}},
		{ID: "pg.events", Target: tgPg, Name: "events", Columns: cols},
	}
	// Flush the MySQL buffers every 4 rows, so that both tables send
	// batches of the same size (4 partitions: 4 distinct upsert keys).
	e.cfg.Targets[0].BatchRows = 4
	s := e.open()
	g := gensource.Config{Records: 400, Partitions: 4, Batch: 4, Payload: 8}
	if err := s.Run(ctx, gensource.New(g), sink.RunOptions{CheckpointRecords: 40, CheckpointInterval: time.Second,
		SweepInterval: -1, DrainTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var latest int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM latest5").Scan(&latest); err != nil {
		t.Fatal(err)
	}
	my, pg := e.counts()
	t.Logf("MariaDB events: %v; PostgreSQL events: %v; latest5 rows: %d", my, pg, latest)
	e.exactlyOnce(400)
	if latest != 4 {
		t.Errorf("latest5 holds %d rows, want one per partition (4)", latest)
	}
}

// TestExternalCommitOtherMembersHandle: External.Commit says "A
// handle this External does not hold (one restored from state) is
// committed as given", which a committer that gathers the handles of every
// member (Flink's Sink V2 committer) relies on. But Commit decides whether
// h is "mine" by checkpoint id alone: given member 1's handle of
// checkpoint 5 while member 0's own handle of checkpoint 5 is pending, it
// committed member 0's handle, found the id among those it committed, and
// returned nil without ever committing member 1's (now: by
// TransactionKey). Its records never land
// (its branches stay prepared; no Restore fences a transaction numbered at
// or below the restored checkpoint), though every Commit returned nil.
func TestExternalCommitOtherMembersHandle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := gen(600, 3)
	recs := records(g)
	ctx := testCtx(t)
	s := e.open()
	var xs [2]*sink.External[sqlsink.Handle]
	for m := range xs {
		x, err := s.External(ctx, uint32(m), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Restore(ctx, nil, 0); err != nil {
			t.Fatal(err)
		}
		xs[m] = x
	}
	var hs [2]sqlsink.Handle
	for m, x := range xs {
		if err := x.Write(ctx, recs[m*300:(m+1)*300]); err != nil {
			t.Fatal(err)
		}
		h, err := x.PreCommit(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		hs[m] = roundTrip(t, h)
	}
	// Checkpoint 5 completes; one committer commits every member's
	// handle, here through member 0's External, in the order they came.
	for _, h := range []sqlsink.Handle{hs[1], hs[0]} {
		if err := xs[0].Commit(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	my, pg := e.counts()
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after every Commit returned nil: %s %v, %s %v; branches left prepared: %d", tgMy, my, tgPg, pg, len(st.Branches))
	// Member 1's transaction is decided: its PostgreSQL branch is
	// committed. (Its MariaDB branch may wait for member 1's session:
	// MariaDB commits a branch from another session only once the
	// preparing one is gone, fact 6; Commit leaves it to restore.)
	if pg.rows != 600 {
		t.Fatalf("member 1's handle was not committed: PostgreSQL holds %d rows, want 600", pg.rows)
	}
	// Member 1 goes away (its sessions with it); the committer's retry,
	// or a restore, finishes phase two.
	if err := xs[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = e.open()
	x, err := s.External(ctx, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Restore(ctx, hs[:], 5); err != nil {
		t.Fatal(err)
	}
	e.exactlyOnce(600)
}

// TestExternalNumberSpentByFailedPreCommit: External numbered a
// transaction e.last+1, and e.last moved only when a PreCommit succeeded
// (now an aborted transaction spends its number). When a PreCommit fails after one branch voted yes (here
// PostgreSQL refuses at PREPARE TRANSACTION, a deferred constraint
// trigger, while MariaDB prepared), the open transaction is aborted
// behind the fence: an abort marker is claimed under (incarnation, txn).
// The caller fails that checkpoint and carries on (it writes the records
// again); the next transaction gets the same number, hence the same
// decision key, and its Commit, after the caller's checkpoint completed,
// finds the old marker: ErrAborted, "a Restore fenced it", though no
// Restore ran. A restart's Restore with that handle fails the same way,
// for ever.
func TestExternalNumberSpentByFailedPreCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	e.refusePGPrepare(ctx)
	g := gen(300, 3)
	recs := records(g)
	s := e.open()
	x, err := s.External(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Restore(ctx, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if _, err := x.PreCommit(ctx, 5); err == nil {
		t.Fatal("PostgreSQL was to refuse the first prepare")
	} else {
		t.Logf("checkpoint 5 failed, as arranged: %v", err)
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "UPDATE flag SET fail = false"); err != nil {
		t.Fatal(err)
	}
	// The caller fails checkpoint 5 and writes the records again for
	// checkpoint 6, which completes.
	if err := x.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	h, err := x.PreCommit(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint 6's handle: txn %d", h.Checkpoint)
	if h.Checkpoint < 2 || h.Checkpoint > 6 {
		t.Errorf("checkpoint 6's transaction is numbered %d: want above the failed one's (1) and at most 6", h.Checkpoint)
	}
	if _, err := x.PreCommit(ctx, 6); err == nil {
		t.Error("a second PreCommit under checkpoint 6 was accepted")
	}
	if err := x.Commit(ctx, h); err != nil {
		t.Fatalf("Commit of completed checkpoint 6: %v", err)
	}
	e.exactlyOnce(300)
}

// TestJSONNumbersLandExactly: numbers beyond int64 or float64 land
// exactly in BIGINT UNSIGNED and DECIMAL (MariaDB, INSERT) and NUMERIC
// (PostgreSQL, COPY and upsert): the mapping passes their JSON text, which
// each database converts itself. Before, the mapping made float64s of them
// (see TestJSONNumbersExact): MariaDB refused the float64 of
// 18446744073709551615 ("Error 1264 (22003): Out of range value for column
// 'a'") and every checkpoint aborted until Run stopped; the other values
// would have landed as other numbers.
func TestJSONNumbersLandExactly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	if err := e.my.Server.Exec(ctx, e.my.Name, "CREATE TABLE nums (a BIGINT UNSIGNED, d DECIMAL(30,2))"); err != nil {
		t.Fatal(err)
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "CREATE TABLE nums (a numeric(20), d numeric(30,2))",
		"CREATE TABLE nums_up (a numeric(20) PRIMARY KEY, d numeric(30,2))"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nums.ndjson")
	if err := os.WriteFile(path, []byte(`{"a": 18446744073709551615, "d": 12345678901234567.25}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cols := []sqlsink.Column{{Name: "a", From: "$.a"}, {Name: "d", From: "$.d"}}
	e.cfg.Tables = []sqlsink.Table{
		{ID: "my", Target: tgMy, Name: "nums", Columns: cols},
		{ID: "pg", Target: tgPg, Name: "nums", Columns: cols},
		{ID: "pg.up", Target: tgPg, Name: "nums_up", Columns: cols, Upsert: true, Key: []string{"a"}},
	}
	src, err := filesource.New(filesource.Config{Files: []string{path}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := e.open().Run(ctx, src, runOpts()); err != nil {
		t.Fatal(err)
	}
	const want = "18446744073709551615 12345678901234567.25"
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got string
	if err := db.QueryRowContext(ctx, "SELECT CONCAT(a, ' ', d) FROM nums").Scan(&got); err != nil || got != want {
		t.Errorf("MariaDB nums holds %q (%v), want %q", got, err, want)
	}
	c, err := pgxConnect(ctx, e.pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, tb := range []string{"nums", "nums_up"} {
		if err := c.QueryRow(ctx, "SELECT a::text || ' ' || d::text FROM "+tb).Scan(&got); err != nil || got != want {
			t.Errorf("PostgreSQL %s holds %q (%v), want %q", tb, got, err, want)
		}
	}
}

// TestCheckTables: CheckTables compares the tables with the targets'
// catalogues (a missing table, a mapped column the table lacks, an upsert
// key that is no unique key: none, a prefix index, a key of other columns,
// a partial index), and Run refuses to start an instance over a table
// that does not fit (ErrTable). Found by an adversarial review: doctor
// checked only that the tables exist, and on MariaDB an upsert whose key
// was no unique key inserted a row per record ("upsert on key p (one
// partition, two records in two checkpoints) left 2 rows in latest, want
// 1").
func TestCheckTables(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	if err := e.my.Server.Exec(ctx, e.my.Name,
		"CREATE TABLE nokey (p VARCHAR(64), seq BIGINT)",
		"CREATE TABLE prefix (p VARCHAR(64), seq BIGINT, UNIQUE KEY (p(4)))",
		"CREATE TABLE wider (p VARCHAR(64), q INT, seq BIGINT, UNIQUE KEY (p, q))",
		"CREATE TABLE okkey (P VARCHAR(64), q INT, seq BIGINT, KEY (p), UNIQUE KEY (q, p))"); err != nil {
		t.Fatal(err)
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name,
		"CREATE TABLE partial (p text, seq bigint)",
		"CREATE UNIQUE INDEX ON partial (p) WHERE seq > 0",
		"CREATE TABLE okkey (p text, q int, seq bigint, UNIQUE (q, p))"); err != nil {
		t.Fatal(err)
	}
	cols := []sqlsink.Column{{Name: "p", From: "partition"}, {Name: "seq", From: "$.id"}}
	cols2 := []sqlsink.Column{{Name: "p", From: "partition"}, {Name: "q", From: "$.id"}, {Name: "seq", From: "$.id"}}
	up := func(name string, cols []sqlsink.Column, key ...string) sqlsink.Table {
		return sqlsink.Table{Name: name, Columns: cols, Upsert: true, Key: key}
	}
	my := []sqlsink.Table{
		e.cfg.Tables[0],
		{Name: "events", Columns: append(slices.Clone(e.cfg.Tables[0].Columns), sqlsink.Column{Name: "nope", From: "$.v"})},
		{Name: "absent", Columns: cols},
		up("nokey", cols, "p"),
		up("prefix", cols, "p"),
		up("wider", cols2, "p"),
		up("okkey", cols2, "p", "q"),
		up("latest", []sqlsink.Column{{Name: "p", From: "partition"}, {Name: "k", From: "$.id"}, {Name: "seq", From: "$.id"}}, "p"),
	}
	want := []string{"", "no column nope", "missing", "the upsert key (p) is not a unique key", "the upsert key (p) is not a unique key",
		"the upsert key (p) is not a unique key", "", ""}
	pg := []sqlsink.Table{up("partial", cols, "p"), up("okkey", cols2, "p", "q"), up("okkey", []sqlsink.Column{{Name: "P", From: "partition"}, {Name: "q", From: "$.id"}}, "P", "q")}
	wantPg := []string{"the upsert key (p) is not a unique key", "", "no column P; the upsert key (P, q)"}
	for _, c := range []struct {
		target sqlsink.TargetConfig
		tables []sqlsink.Table
		want   []string
	}{{e.cfg.Targets[0], my, want}, {e.cfg.Targets[1], pg, wantPg}} {
		got, err := sqlsink.CheckTables(ctx, c.target, c.tables)
		if err != nil {
			t.Fatal(err)
		}
		for i, te := range got {
			switch {
			case c.want[i] == "" && te != nil:
				t.Errorf("%s: table %s fits, but CheckTables says %v", c.target.Name, c.tables[i].Name, te)
			case c.want[i] != "" && (te == nil || !strings.Contains(te.Error(), c.want[i])):
				t.Errorf("%s: table %s: CheckTables says %v, want %q", c.target.Name, c.tables[i].Name, te, c.want[i])
			}
		}
	}

	e.cfg.Tables = append(e.cfg.Tables, sqlsink.Table{ID: "nokey", Target: tgMy, Name: "nokey", Columns: cols, Upsert: true, Key: []string{"p"}})
	err := e.open().Run(ctx, gensource.New(gen(10, 1)), runOpts())
	var te *sqlsink.TableError
	if !errors.Is(err, sqlsink.ErrTable) || !errors.As(err, &te) || te.Table != "nokey" {
		t.Fatalf("Run over an upsert table without its unique key: %v, want a TableError of nokey", err)
	}
	t.Log(err)
	if my, pg := e.counts(); my.rows != 0 || pg.rows != 0 {
		t.Fatalf("Run refused, but wrote %v, %v", my, pg)
	}
}

// TestExternalSpentTransactionFenced: an external member's PreCommit fails
// half-way (MariaDB prepared, PostgreSQL refused) and its abort cannot
// claim the abort marker (the decisions table is away). No state names
// that transaction and, numbered below the next checkpoint, no Restore
// would roll it back: the next handle names it as spent, and committing
// that handle fences it and rolls its MariaDB branch back. (Found by
// review: Classify left it, "begun before the restored checkpoint: a
// restored state names it", holding its locks through every restart.)
func TestExternalSpentTransactionFenced(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, tgPg)
	ctx := testCtx(t)
	e.refusePGPrepare(ctx)
	recs := records(gen(300, 3))
	s := e.open()
	x, err := s.External(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Restore(ctx, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := x.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "ALTER TABLE xa_sink_decisions RENAME TO xa_sink_decisions_away"); err != nil {
		t.Fatal(err)
	}
	if _, err := x.PreCommit(ctx, 5); err == nil {
		t.Fatal("PostgreSQL was to refuse the first prepare")
	} else {
		t.Logf("checkpoint 5 failed, its abort unfenced, as arranged: %v", err)
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "ALTER TABLE xa_sink_decisions_away RENAME TO xa_sink_decisions",
		"UPDATE flag SET fail = false"); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Status(ctx); err != nil || len(st.Branches) == 0 {
		t.Fatalf("status: %d branches, %v; want the failed transaction's MariaDB branch left prepared", len(st.Branches), err)
	}
	if err := x.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	h, err := x.PreCommit(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	h = roundTrip(t, h)
	if len(h.Spent) != 1 || h.Spent[0] >= h.Checkpoint {
		t.Fatalf("checkpoint 6's handle (txn %d) names spent %v; want the failed transaction", h.Checkpoint, h.Spent)
	}
	if err := x.Commit(ctx, h); err != nil {
		t.Fatal(err)
	}
	e.exactlyOnce(300)
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Branches) != 0 {
		t.Fatalf("branches left prepared after the spent transaction was named: %+v", st.Branches)
	}
}

// refusePGPrepare makes PostgreSQL refuse to prepare a transaction that
// inserted into events (a deferred constraint trigger raises at PREPARE
// TRANSACTION) until the table flag says otherwise: UPDATE flag SET fail
// = false.
func (e *env) refusePGPrepare(ctx context.Context) {
	e.t.Helper()
	if err := e.pg.Server.Exec(ctx, e.pg.Name,
		"CREATE TABLE flag (fail boolean NOT NULL)",
		"INSERT INTO flag VALUES (true)",
		`CREATE FUNCTION refuse_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF (SELECT fail FROM flag) THEN RAISE EXCEPTION 'refused at prepare'; END IF; RETURN NULL; END $$`,
		"CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_once()"); err != nil {
		e.t.Fatal(err)
	}
}
