package sqlsink_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/sink/sqlsink"
)

// TestSpentFencedByEmptyHandle: as TestExternalSpentTransactionFenced, an
// external member's PreCommit fails half-way (MariaDB prepared,
// PostgreSQL refused) and its abort cannot claim the marker. The stream
// then goes idle: the next checkpoint is empty, so its handle names the
// spent transaction but has no branches and no partitions, and Commit
// returns before fenceSpent. The member restarts (a higher generation)
// and restores from that checkpoint: Restore commits the empty handle
// (again no fence) and AbortLingering leaves every transaction numbered
// at or below the restored checkpoint to the states that name them. The
// spent transaction's MariaDB branch stays prepared, holding its locks.
func TestSpentFencedByEmptyHandle(t *testing.T) {
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
	}
	if err := e.pg.Server.Exec(ctx, e.pg.Name, "ALTER TABLE xa_sink_decisions_away RENAME TO xa_sink_decisions",
		"UPDATE flag SET fail = false"); err != nil {
		t.Fatal(err)
	}
	// An idle stream: checkpoint 6 has no records.
	h, err := x.PreCommit(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	h = roundTrip(t, h)
	t.Logf("checkpoint 6's handle: txn %d, spent %v, %d branches, %d partitions", h.Checkpoint, h.Spent, len(h.Branches), len(h.Partitions))
	if err := x.Commit(ctx, h); err != nil {
		t.Fatal(err)
	}
	// The member restarts from checkpoint 6, whose state holds h.
	s2 := e.open()
	x2, err := s2.External(ctx, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := x2.Restore(ctx, []sqlsink.Handle{h}, 6); err != nil {
		t.Fatal(err)
	}
	st, err := s2.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Branches) != 0 {
		t.Errorf("after Restore from the empty checkpoint 6 (whose handle names spent %v), %d branches are left prepared: %+v",
			h.Spent, len(st.Branches), st.Branches)
	}
}

// TestMySQLSupersetUnique: a MySQL upsert table whose other unique
// key holds every key column (UNIQUE (k, email) besides PRIMARY KEY (k))
// can never make ON DUPLICATE KEY UPDATE hit another key's row: a
// collision on (k, email) is a collision on k, the same row. CheckTables
// refused it as OtherUniques (found by review), and so did every instance
// start (sink run, External) of a table that worked before 1ded35c. A
// unique key on an unmapped nullable column stays refused: inserts write
// NULL there only if its default is NULL, which the check does not read
// (conservative; docs/sink.md).
func TestMySQLSupersetUnique(t *testing.T) {
	my := dbtest.MySQLDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := my.Server.Exec(ctx, my.Name,
		"CREATE TABLE sup (k VARCHAR(10) PRIMARY KEY, email VARCHAR(64), UNIQUE KEY (k, email))",
		"CREATE TABLE nul (k VARCHAR(10) PRIMARY KEY, email VARCHAR(64), ext VARCHAR(10) NULL, UNIQUE KEY (ext))"); err != nil {
		t.Fatal(err)
	}
	tb := sqlsink.Table{Target: "maria", Upsert: true, Key: []string{"k"},
		Columns: []sqlsink.Column{{Name: "k", From: "$.k"}, {Name: "email", From: "$.email"}}}
	tables := []sqlsink.Table{tb, tb}
	tables[0].Name, tables[1].Name = "sup", "nul"
	tes, err := sqlsink.CheckTables(ctx, sqlsink.TargetConfig{Name: "maria", Driver: sqlsink.DriverMySQL, DSN: my.DSN(), Init: true}, tables)
	if err != nil {
		t.Fatal(err)
	}
	if te := tes[0]; te != nil {
		t.Errorf("%s: refused: %v", tables[0].Name, strings.TrimSpace(te.Error()))
	}
	if te := tes[1]; te == nil || len(te.OtherUniques) != 1 {
		t.Errorf("%s: %v; want refused for its unique key (ext)", tables[1].Name, te)
	}
}
