package cli_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadb/xa/internal/cli"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/sqlsink"
)

// Sink tests: xactl sink setup, run and status against the test's MariaDB
// and PostgreSQL databases (and kfake, an in-process Kafka), and the sink
// branches list, recover, commit and rollback meet. The sink is named
// after the test's node, so that its XIDs (xs1.<node>.…) are the test's
// leftovers to roll back on the shared MariaDB server.

// sinkEnv is a test env with the table events in both databases, which a
// sink named after the node writes.
type sinkEnv struct {
	*env
	name string
}

const eventsDDL = "CREATE TABLE events (id BIGINT PRIMARY KEY, p VARCHAR(64) NOT NULL, seq BIGINT, body TEXT)"

func newSinkEnv(t *testing.T) *sinkEnv {
	t.Helper()
	e := &sinkEnv{env: newEnv(t)}
	e.name = e.node
	if err := e.my.Server.Exec(e.ctx, e.my.Name, eventsDDL+" ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if err := e.pg.Server.Exec(e.ctx, e.pg.Name, eventsDDL); err != nil {
		t.Fatal(err)
	}
	return e
}

// sinkConfig writes a configuration with the test's participants, log,
// and the sink: source is the YAML of its source (indented under
// source:), extra more settings of the sink.
func (e *sinkEnv) sinkConfig(file, source, extra string) string {
	e.t.Helper()
	var b strings.Builder
	b.WriteString(e.configText("10m"))
	fmt.Fprintf(&b, "sinks:\n  - name: %s\n    source:\n", e.name)
	for _, l := range strings.Split(strings.TrimSpace(source), "\n") {
		fmt.Fprintf(&b, "      %s\n", l)
	}
	fmt.Fprintf(&b, "    targets: [%s, %s]\n", myName, pgName)
	b.WriteString("    tables:\n")
	for _, tg := range []string{myName, pgName} {
		fmt.Fprintf(&b, "      - target: %s\n        name: events\n        columns: {id: $.id, p: partition, seq: $.seq, body: $}\n", tg)
	}
	b.WriteString(extra)
	return e.writeConfig(file, b.String())
}

// rows counts the rows of events and their distinct ids in both databases.
func (e *sinkEnv) rows() (my, myDistinct, pg, pgDistinct int) {
	e.t.Helper()
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRowContext(e.ctx, "SELECT COUNT(*), COUNT(DISTINCT id) FROM events").Scan(&my, &myDistinct); err != nil {
		e.t.Fatal(err)
	}
	c := e.pgConn()
	defer c.Close(context.Background())
	if err := c.QueryRow(e.ctx, "SELECT COUNT(*), COUNT(DISTINCT id) FROM events").Scan(&pg, &pgDistinct); err != nil {
		e.t.Fatal(err)
	}
	return
}

// wantRowsOnce checks that both databases hold n rows, each id once.
func (e *sinkEnv) wantRowsOnce(n int) {
	e.t.Helper()
	my, myD, pg, pgD := e.rows()
	if my != n || myD != n || pg != n || pgD != n {
		e.t.Errorf("events: MariaDB %d rows (%d ids), PostgreSQL %d rows (%d ids); want %d rows, each id once", my, myD, pg, pgD, n)
	}
}

// JSON of xactl sink status.
type sinkStatusJSON struct {
	Sink       string `json:"sink"`
	Progress   string `json:"progress"`
	Partitions []struct {
		Partition   string `json:"partition"`
		Position    string `json:"position"`
		InTable     bool   `json:"in_table"`
		End         *int64 `json:"end"`
		Lag         *int64 `json:"lag"`
		GroupOffset *int64 `json:"group_offset"`
		Epoch       int64  `json:"epoch"`
		Owner       uint64 `json:"owner"`
		Checkpoint  uint64 `json:"checkpoint"`
		Updated     string `json:"updated"`
	} `json:"partitions"`
	Lag       *int64 `json:"lag"`
	Instances []struct {
		Incarnation uint64 `json:"incarnation"`
		Partitions  int    `json:"partitions"`
	} `json:"instances"`
	Branches       []sinkBranchJSON `json:"branches"`
	BranchesListed bool             `json:"branches_listed"`
	Stuck          *int             `json:"stuck"`
	Errors         []string         `json:"errors"`
}

type sinkBranchJSON struct {
	Name        string  `json:"name"`
	XID         string  `json:"xid"`
	Target      string  `json:"target"`
	Incarnation uint64  `json:"incarnation"`
	Member      *uint32 `json:"member"`
	Generation  *uint32 `json:"generation"`
	Checkpoint  uint64  `json:"checkpoint"`
	Configured  bool    `json:"configured"`
	AgeSeconds  *int64  `json:"age_seconds"`
	Decision    string  `json:"decision"`
	Restore     string  `json:"restore"`
	Why         string  `json:"why"`
	Stuck       bool    `json:"stuck"`
	Error       string  `json:"error"`
}

// listSinkJSON is list's (and recover's) JSON with the sink object of a
// branch.
type listSinkJSON struct {
	Branches []struct {
		branchJSON
		Sink *sinkBranchJSON `json:"sink"`
	} `json:"branches"`
	InDoubt *int `json:"in_doubt"`
}

// TestSink runs the sink tests, in parallel with each other, before the
// package's parallel tests start (a test that is not parallel finishes
// before they resume): they load the shared MariaDB server, whose
// INNODB_TRX snapshot is the server's (the sinks' restore and doctor read
// it), and the tests of phase two from another session need fresh
// readings of it.
func TestSink(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{{"Run", testSinkRun}, {"Branches", testSinkBranches}, {"DecidedCommit", testSinkDecidedCommit}, {"Doctor", testSinkDoctor}, {"Kafka", testSinkKafka}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t)
		})
	}
}

// testSinkRun: sink setup, then sink run of a bounded generator into
// MariaDB and PostgreSQL (with the bookkeeping in either), writes every
// record once in both, says so on stderr with progress lines, and sink
// status then shows every partition at the generator's end with lag 0,
// one instance owning them, and no prepared branch.
func testSinkRun(t *testing.T) {
	for _, progress := range []string{pgName, myName} {
		t.Run("progress="+progress, func(t *testing.T) {
			t.Parallel()
			e := newSinkEnv(t)
			const records, parts = 3000, 4
			cfg := e.sinkConfig("sink.yaml", fmt.Sprintf("kind: generator\nrecords: %d\npartitions: %d", records, parts),
				fmt.Sprintf("    progress: %s\n    checkpoint: {records: 400, interval: 100ms}\n", progress))

			// Before setup: status says to run it.
			e.runWith(cfg, "sink", "status", e.name).want(t, 1).stderrHas(t, "xactl sink setup "+e.name)
			e.runWith(cfg, "sink", "setup", e.name).want(t, 0).stdoutHas(t, "xa_sink_progress", progress)
			// Idempotent.
			e.runWith(cfg, "sink", "setup", e.name).want(t, 0)

			r := e.runWith(cfg, "sink", "run", e.name, "--progress-every", "20ms").want(t, 0)
			r.stderrHas(t, "records committed", "/s; lag ", "checkpoint ", "pending", "the source ended", fmt.Sprintf("%d records committed in", records))
			if !regexp.MustCompile(`sink \S+: 3000 records committed, \d+/s; lag 0 over 4 partitions; checkpoint \d+ committed`).MatchString(r.stderr) {
				t.Errorf("no final progress line with every record and lag 0: %s", r)
			}
			t.Logf("sink run's stderr:\n%s", r.stderr)
			e.wantRowsOnce(records)

			r = e.runWith(cfg, "sink", "status", e.name, "-o", "json").want(t, 0)
			var st sinkStatusJSON
			r.json(t, &st)
			g := gensource.Config{Records: records, Partitions: parts}
			if len(st.Partitions) != parts || st.Lag == nil || *st.Lag != 0 || len(st.Branches) != 0 || !st.BranchesListed || st.Stuck == nil || *st.Stuck != 0 || len(st.Errors) != 0 {
				t.Fatalf("status: %s", r)
			}
			for p, ps := range st.Partitions {
				want := int64(g.Len(p))
				if ps.Partition != g.Partition(p) || ps.Position != strconv.FormatInt(want, 10) || ps.End == nil || *ps.End != want ||
					ps.Lag == nil || *ps.Lag != 0 || ps.Epoch != 1 || ps.Owner != 1 || ps.Checkpoint == 0 || ps.Updated == "" {
					t.Errorf("partition %d: %+v, want position = end = %d, lag 0, epoch 1, owner 1", p, ps, want)
				}
			}
			if len(st.Instances) != 1 || st.Instances[0].Incarnation != 1 || st.Instances[0].Partitions != parts {
				t.Errorf("instances: %+v, want incarnation 1 owning %d partitions", st.Instances, parts)
			}
			r = e.runWith(cfg, "sink", "status", e.name).want(t, 0)
			r.stdoutHas(t, "PARTITION", "Lag: 0 records over 4 partitions", "No prepared branches of sink "+e.name)
			t.Logf("sink status:\n%s", r.stdout)

			// A second run finds the generator read to its end: nothing
			// more is written, the positions stay. With -o json, the
			// result is on stdout.
			r = e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0", "-o", "json").want(t, 0)
			r.stderrHas(t, "0 records committed in")
			var run struct {
				Sink             string `json:"sink"`
				Ended            string `json:"ended"`
				RecordsCommitted *int64 `json:"records_committed"`
			}
			r.json(t, &run)
			if run.Sink != e.name || run.Ended != "source ended" || run.RecordsCommitted == nil || *run.RecordsCommitted != 0 {
				t.Errorf("sink run -o json: %s", r)
			}
			e.wantRowsOnce(records)
		})
	}
}

// blockAtPrepare is an Observer that holds the sink's goroutine when the
// first checkpoint is prepared, before it goes to its decision: the test
// then closes the sink, leaving the checkpoint's branches prepared and
// undecided, as a crash between prepare and decision does.
type blockAtPrepare struct {
	sink.NopObserver
	once     sync.Once
	prepared chan struct{}
	release  chan struct{}
}

func (o *blockAtPrepare) PendingChanged(n int) {
	if n > 0 {
		o.once.Do(func() {
			close(o.prepared)
			<-o.release
		})
	}
}

// sinkAPIConfig is the sink of sinkConfig, for the sink package.
func (e *sinkEnv) sinkAPIConfig(grace time.Duration) sqlsink.Config {
	cols := []sqlsink.Column{{Name: "body", From: "$"}, {Name: "id", From: "$.id"}, {Name: "p", From: "partition"}, {Name: "seq", From: "$.seq"}}
	return sqlsink.Config{Name: e.name, Progress: myName, RestoreGrace: grace,
		Targets: []sqlsink.TargetConfig{{Name: myName, Driver: "mysql", DSN: e.my.DSN(), Init: true}, {Name: pgName, Driver: "postgres", DSN: e.pg.DSN(), Init: true}},
		Tables:  []sqlsink.Table{{ID: "my", Target: myName, Name: "events", Columns: cols}, {ID: "pg", Target: pgName, Name: "events", Columns: cols}}}
}

// abandon runs an instance of the sink that crashes once its first
// checkpoint is prepared: its branches stay prepared, undecided, and its
// incarnation owns the partitions. It returns the branches' refs.
func (e *sinkEnv) abandon(g gensource.Config) (my, pg sqlsink.Ref) {
	e.t.Helper()
	s, err := sqlsink.Open(e.ctx, e.sinkAPIConfig(0))
	if err != nil {
		e.t.Fatal(err)
	}
	obs := &blockAtPrepare{prepared: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- s.Run(e.ctx, gensource.New(g), sink.RunOptions{CheckpointRecords: 50, CheckpointInterval: time.Minute, Observer: obs})
	}()
	select {
	case <-obs.prepared:
	case err := <-done:
		e.t.Fatalf("the run ended before its first checkpoint was prepared: %v", err)
	}
	s.Close()
	close(obs.release)
	if err := <-done; !errors.Is(err, sink.ErrClosed) {
		e.t.Fatalf("the abandoned run ended with %v, want sink.ErrClosed", err)
	}
	my = sqlsink.Ref{Sink: e.name, Incarnation: 1, Checkpoint: 1, Target: myName}
	pg = sqlsink.Ref{Sink: e.name, Incarnation: 1, Checkpoint: 1, Target: pgName}
	if !e.myPrepared(my.XID()) || !e.pgPrepared(pg.XID().String()) {
		e.t.Fatalf("the abandoned checkpoint's branches are not prepared: %s on MariaDB %v, %s on PostgreSQL %v",
			my, e.myPrepared(my.XID()), pg, e.pgPrepared(pg.XID().String()))
	}
	return my, pg
}

// external leaves a checkpoint of an externally driven member prepared and
// uncommitted, as a stream processor whose checkpoint never completed.
func (e *sinkEnv) external(member uint32, recs []sink.Record) (my, pg sqlsink.Ref) {
	e.t.Helper()
	s, err := sqlsink.Open(e.ctx, e.sinkAPIConfig(0))
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	x, err := s.External(e.ctx, member, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := x.Write(e.ctx, recs); err != nil {
		e.t.Fatal(err)
	}
	h, err := x.PreCommit(e.ctx, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	return h.Ref(myName), h.Ref(pgName)
}

func findSinkBranch(t *testing.T, out listSinkJSON, participant string, ref sqlsink.Ref) *sinkBranchJSON {
	t.Helper()
	for _, b := range out.Branches {
		if b.Participant == participant && b.XID == ref.XID().String() {
			if b.Sink == nil {
				t.Fatalf("branch %s on %s is not shown as a sink's: %+v", ref, participant, b)
			}
			return b.Sink
		}
	}
	t.Fatalf("branch %s not listed on %s", ref, participant)
	return nil
}

// testSinkBranches: the branches of a crashed sink instance (prepared,
// undecided, its incarnation still owning the partitions) are shown by
// list as the sink's, with sink, incarnation, checkpoint and what the
// sink's restore would do (leave while young; fence once older than
// restore_grace where the database says how old: PostgreSQL); recover
// never touches them; commit and rollback refuse them without --force,
// saying that the sink's restore resolves them; sink status lists them.
// An external member's branch, which the sink's own restore never
// resolves, makes sink status exit 3. A new instance's restore resolves
// the crashed one's: its rows never land.
func testSinkBranches(t *testing.T) {
	e := newSinkEnv(t)
	g := gensource.Config{Records: 400, Partitions: 2}
	cfg := e.sinkConfig("sink.yaml", "kind: generator\nrecords: 400\npartitions: 2", "    progress: "+myName+"\n")
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)
	my, pg := e.abandon(g)
	prepared := time.Now()

	// list: the sink's, not foreign; nothing of ours in doubt (exit 0).
	r := e.runWith(cfg, "list", "-o", "json").want(t, 0)
	var out listSinkJSON
	r.json(t, &out)
	for _, c := range []struct {
		participant string
		ref         sqlsink.Ref
	}{{myName, my}, {pgName, pg}} {
		b := findSinkBranch(t, out, c.participant, c.ref)
		if b.Name != e.name || b.Incarnation != 1 || b.Checkpoint != 1 || b.Target != c.ref.Target || !b.Configured ||
			b.Decision != "undecided" || b.Restore != "leave" || !strings.Contains(b.Why, "young, of an instance that owns partitions") || b.Stuck {
			t.Errorf("list shows %s as %+v, want sink %s, incarnation 1, checkpoint 1, undecided, restore: leave (young, its instance owns partitions)", c.ref, b, e.name)
		}
	}
	if b := findSinkBranch(t, out, pgName, pg); b.AgeSeconds == nil {
		t.Errorf("PostgreSQL says when %s was prepared, yet its age is not shown", pg)
	}
	// Every sink's branch is foreign to recovery. The servers are shared
	// with the other sink tests, running in parallel: only this sink's
	// branches have this sink's restore as their action.
	for _, b := range out.Branches {
		if b.Sink != nil && (b.Verdict != "foreign" ||
			b.Sink.Name == e.name && !strings.HasPrefix(b.Action, "none: sink "+e.name+"'s; its restore would leave")) {
			t.Errorf("sink branch %s: verdict %q action %q, want foreign (recovery's) and the sink's restore's action", b.XID, b.Verdict, b.Action)
		}
	}
	r = e.runWith(cfg, "list").want(t, 0)
	r.stdoutHas(t, "Branches of exactly-once sinks", "SINK", "INCARNATION", "CHECKPOINT", "RESTORE")
	t.Logf("list:\n%s", r.stdout)
	sinkSection := r.stdout[strings.Index(r.stdout, "Branches of exactly-once sinks"):]
	mainTable := r.stdout[:strings.Index(r.stdout, "Branches of exactly-once sinks")]
	if strings.Contains(mainTable, pg.XID().String()) || !strings.Contains(sinkSection, e.name) || strings.Count(sinkSection, "leave: young") < 2 {
		t.Errorf("the sink branches are not in the sink section alone: %s", r)
	}

	// With a restore grace of 1s, a newcomer's restore fences the
	// PostgreSQL branch once it is older; MySQL keeps no prepare time.
	short := e.sinkConfig("short.yaml", "kind: generator\nrecords: 400\npartitions: 2", "    progress: "+myName+"\n    restore_grace: 1s\n")
	ageBeyond(prepared, time.Second)
	r = e.runWith(short, "list", "-o", "json").want(t, 0)
	out = listSinkJSON{}
	r.json(t, &out)
	if b := findSinkBranch(t, out, pgName, pg); b.Restore != "fence and roll back" || b.Why != "older than the restore grace" {
		t.Errorf("past the grace, list shows %s as %+v, want restore: fence and roll back (older than the restore grace)", pg, b)
	}
	if b := findSinkBranch(t, out, myName, my); b.Restore != "leave" || !strings.Contains(b.Why, "MySQL keeps no prepare time") {
		t.Errorf("list shows %s as %+v, want leave, saying MySQL keeps no prepare time", my, b)
	}

	// recover never touches them.
	r = e.runWith(cfg, "recover", "-o", "json").want(t, 0)
	out = listSinkJSON{}
	r.json(t, &out)
	for _, b := range out.Branches {
		if b.Sink != nil && b.Done {
			t.Errorf("recover resolved sink branch %s on %s", b.XID, b.Participant)
		}
	}
	if !e.myPrepared(my.XID()) || !e.pgPrepared(pg.XID().String()) {
		t.Fatalf("recover resolved a sink branch: MariaDB %v, PostgreSQL %v", e.myPrepared(my.XID()), e.pgPrepared(pg.XID().String()))
	}

	// commit and rollback refuse without --force, saying why.
	for _, verb := range []string{"commit", "rollback"} {
		for _, ref := range []sqlsink.Ref{my, pg} {
			r := e.runWith(cfg, verb, ref.XID().String()).want(t, 1)
			r.stderrHas(t, "is a branch of sink "+e.name, "incarnation 1, checkpoint 1", "not the transaction manager's",
				"The sink's restore resolves it", "undecided; the sink's restore would leave it", "--force")
			if verb == "commit" && ref == pg {
				t.Logf("commit refused:\n%s", r.stderr)
			}
		}
	}
	if !e.myPrepared(my.XID()) || !e.pgPrepared(pg.XID().String()) {
		t.Fatal("a refused commit or rollback resolved a sink branch")
	}

	// sink status lists them; restore resolves them by itself: exit 0.
	r = e.runWith(cfg, "sink", "status", e.name, "-o", "json").want(t, 0)
	var st sinkStatusJSON
	r.json(t, &st)
	if len(st.Branches) != 2 || st.Stuck == nil || *st.Stuck != 0 {
		t.Errorf("sink status: %s\nwant the 2 branches of checkpoint 1, none stuck", r)
	}
	for p, ps := range st.Partitions {
		if ps.Position != "" || !ps.InTable || ps.Owner != 1 || ps.Lag == nil || *ps.Lag != int64(g.Len(p)) {
			t.Errorf("partition %+v: want the start (nothing committed), owned by incarnation 1, lag %d", ps, g.Len(p))
		}
	}

	// An external member's uncommitted checkpoint: only its own Restore
	// resolves it, so sink status exits 3.
	emy, epg := e.external(3, []sink.Record{{Partition: "ext/0", Next: "1", Value: []byte(`{"id":100000,"seq":0}`)}})
	r = e.runWith(cfg, "sink", "status", e.name, "-o", "json").want(t, 3)
	st = sinkStatusJSON{}
	r.json(t, &st)
	stuck := 0
	for _, b := range st.Branches {
		if b.Member != nil {
			if *b.Member != 3 || *b.Generation != 1 || b.Restore != "leave" || !b.Stuck || !strings.Contains(b.Why, "external member") {
				t.Errorf("external branch shown as %+v", b)
			}
			stuck++
		}
	}
	if stuck != 2 || st.Stuck == nil || *st.Stuck != 2 {
		t.Errorf("sink status: %s\nwant the external member's 2 branches stuck", r)
	}
	r = e.runWith(cfg, "sink", "status", e.name).want(t, 3)
	r.stdoutHas(t, "member 3 gen 1", "will not resolve by itself")
	t.Logf("sink status:\n%s", r.stdout)

	// A new instance takes the partitions over: its restore fences the
	// crashed instance's checkpoint (its incarnation owns nothing any
	// more) and rolls it back; every record lands once. The external
	// member's branches stay.
	e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0").want(t, 0)
	e.wantRowsOnce(g.Records)
	if e.myPrepared(my.XID()) || e.pgPrepared(pg.XID().String()) {
		t.Errorf("the new instance's restore left the crashed instance's branches prepared")
	}
	if !e.myPrepared(emy.XID()) || !e.pgPrepared(epg.XID().String()) {
		t.Errorf("the new instance's restore resolved an external member's branches")
	}
	// --force does it anyway, recorded as a heuristic outcome.
	e.runWith(cfg, "rollback", "--force", "--reason", "test", epg.XID().String()).want(t, 0).stdoutHas(t, "forced", "heuristic")
	if e.pgPrepared(epg.XID().String()) {
		t.Error("rollback --force left the external branch prepared")
	}
}

// testSinkDoctor: doctor checks, per sink, its tables (missing before
// sink setup), and PostgreSQL's prepared-transaction slots against the
// sink's instances × (1 + max_pending) plus the transaction manager's
// pool: the test server's 200 slots hold 2 × (1 + 2) + 32, not 100 ×
// (1 + 2).
func testSinkDoctor(t *testing.T) {
	e := newSinkEnv(t)
	e.logCommit()
	find := func(out doctorJSON, check string) findingJSON {
		t.Helper()
		f, ok := doctorFindings(out, "sink "+e.name)[check]
		if !ok {
			t.Fatalf("no finding %q for sink %s: %+v", check, e.name, out)
		}
		return f
	}
	src := "kind: generator\nrecords: 10"
	few := e.sinkConfig("few.yaml", src, "    instances: 2\n")
	r := e.runWith(few, "doctor", "-o", "json").want(t, 1)
	var out doctorJSON
	r.json(t, &out)
	if f := find(out, "sink tables"); f.Severity != "FAIL" || !strings.Contains(f.Fix, "xactl sink setup "+e.name) {
		t.Errorf("before setup: %+v, want FAIL with the fix xactl sink setup", f)
	}
	e.runWith(few, "sink", "setup", e.name).want(t, 0)
	r = e.runWith(few, "doctor", "-o", "json").want(t, 0)
	out = doctorJSON{}
	r.json(t, &out)
	if f := find(out, "sink tables"); f.Severity != "ok" {
		t.Errorf("after setup: %+v", f)
	}
	for _, tg := range []string{myName, pgName} {
		if f := find(out, "table "+tg+": events"); f.Severity != "ok" || f.Value != "present" {
			t.Errorf("table events on %s: %+v", tg, f)
		}
	}
	f := find(out, "prepared-transaction slots ("+pgName+")")
	if f.Severity != "ok" || !strings.Contains(f.Value, "max_prepared_transactions 200") || !strings.Contains(f.Value, "needs 6 (2 instances × (1 + 2 pending))") ||
		!strings.Contains(f.Value, "pools 32") || !strings.Contains(f.Value, "38 in all") {
		t.Errorf("slots with 2 instances: %+v", f)
	}
	if f := find(out, "XA RECOVER ("+myName+")"); f.Severity != "ok" || !strings.Contains(f.Value, "0 of sink "+e.name) {
		t.Errorf("XA RECOVER finding: %+v", f)
	}
	if f := find(out, "PROCESS privilege ("+myName+")"); f.Severity != "ok" {
		t.Errorf("PROCESS finding: %+v", f)
	}
	// The progress target's durability, as its start-up check found it
	// (the test server runs with innodb_flush_log_at_trx_commit = 2).
	if f := find(out, "decision durability ("+myName+"): innodb_flush_log_at_trx_commit"); f.Severity != "warn" || f.Value != "2" ||
		!strings.Contains(f.Fix, "partial commit") || !strings.Contains(f.Fix, "SET GLOBAL innodb_flush_log_at_trx_commit=1") {
		t.Errorf("decision durability finding: %+v", f)
	}

	r = e.runWith(few, "doctor").want(t, 0)
	t.Logf("doctor's sink section:\n%s", r.stdout[strings.Index(r.stdout, "sink "+e.name):])

	// With the progress in PostgreSQL (the test server runs with fsync
	// off): its durability findings, and synchronous_commit is no concern
	// of the sink's (its decisions force it on).
	onPg := e.sinkConfig("onpg.yaml", src, "    progress: "+pgName+"\n")
	r = e.runWith(onPg, "doctor", "-o", "json").want(t, 1)
	out = doctorJSON{}
	r.json(t, &out)
	if f := find(out, "decision durability ("+pgName+"): fsync"); f.Severity != "warn" || f.Value != "off" || !strings.Contains(f.Fix, "partial commit") {
		t.Errorf("decision durability (fsync) with the progress in PostgreSQL: %+v", f)
	}
	if f := find(out, "decision durability ("+pgName+"): synchronous_commit"); f.Severity != "ok" || !strings.Contains(f.Value, "set synchronous_commit on") {
		t.Errorf("decision durability (synchronous_commit) with the progress in PostgreSQL: %+v", f)
	}

	many := e.sinkConfig("many.yaml", src, "    instances: 100\n")
	r = e.runWith(many, "doctor", "-o", "json").want(t, 1)
	out = doctorJSON{}
	r.json(t, &out)
	f = find(out, "prepared-transaction slots ("+pgName+")")
	if f.Severity != "FAIL" || !strings.Contains(f.Value, "needs 300") || !strings.Contains(f.Fix, "max_prepared_transactions >= 332") {
		t.Errorf("slots with 100 instances: %+v, want FAIL needing 300 (+ 32)", f)
	}
	t.Logf("the finding: %s = %s %s (%s)", f.Check, f.Value, f.Severity, f.Fix)

	// A table the sink writes that is missing.
	if err := e.pg.Server.Exec(e.ctx, e.pg.Name, "DROP TABLE events"); err != nil {
		t.Fatal(err)
	}
	r = e.runWith(few, "doctor", "-o", "json").want(t, 1)
	out = doctorJSON{}
	r.json(t, &out)
	if f := find(out, "table "+pgName+": events"); f.Severity != "FAIL" || f.Value != "missing" || !strings.Contains(f.Fix, "body, id, p, seq") {
		t.Errorf("missing table: %+v", f)
	}
	e.runWith(few, "sink", "setup", e.name).want(t, 0).stdoutHas(t, "pg: events, which does not exist yet")
}

// testSinkKafka: sink run reads a Kafka topic (kfake, in process) into
// both databases until interrupted, with progress lines and Prometheus
// metrics; interrupting it stops it cleanly (the group is left); sink
// status then shows every partition's position at its end offset, lag 0,
// and the group's committed offsets at the same place.
func testSinkKafka(t *testing.T) {
	e := newSinkEnv(t)
	const topic, perPartition = "events", 150
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	produce := func(from int) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var recs []*kgo.Record
		for p := range int32(3) {
			for i := range perPartition {
				id := from + int(p)*perPartition + i
				recs = append(recs, &kgo.Record{Partition: p, Key: []byte(strconv.Itoa(id)), Value: fmt.Appendf(nil, `{"id":%d,"seq":%d}`, id, i)})
			}
		}
		if err := cl.ProduceSync(e.ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0)
	group := "g-" + e.name
	cfg := e.sinkConfig("kafka.yaml", fmt.Sprintf("kind: kafka\nbrokers: [%s]\ngroup: %s\ntopics: [%s]\nstart: earliest", strings.Join(brokers, ", "), group, topic),
		"    checkpoint: {records: 100, interval: 100ms}\n")
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- cli.MainContext(ctx, []string{"--config", cfg, "sink", "run", e.name, "--progress-every", "100ms", "--metrics-addr", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	waitRows := func(n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			my, _, pg, _ := e.rows()
			if my == n && pg == n {
				return
			}
			select {
			case c := <-code:
				t.Fatalf("sink run exited %d before writing %d rows:\n%s", c, n, stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d and %d rows after 60s, want %d:\n%s", my, pg, n, stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitRows(3 * perPartition)
	produce(3 * perPartition) // more while it runs
	waitRows(6 * perPartition)

	// Metrics: every record committed; lag 0 once a progress line has
	// read it.
	addr := regexp.MustCompile(`metrics on (http://\S+/metrics)`).FindStringSubmatch(stderr.String())
	if addr == nil {
		t.Fatalf("sink run did not say where its metrics are:\n%s", stderr.String())
	}
	var metrics string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(addr[1])
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
		if strings.Contains(metrics, fmt.Sprintf(`xa_sink_records_committed_total{sink="%s"} %d`, e.name, 6*perPartition)) &&
			strings.Contains(metrics, fmt.Sprintf(`xa_sink_lag_records{partition="%s/2",sink="%s"} 0`, topic, e.name)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never showed every record committed and lag 0:\n%s", metrics)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{`xa_sink_checkpoints_total{outcome="committed",sink="` + e.name + `"}`, `xa_sink_checkpoint_phase_duration_seconds_bucket{phase="prepare"`,
		`xa_sink_pending_checkpoints{sink="` + e.name + `"}`, "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, metrics)
		}
	}

	// SIGINT (the context's end): a clean stop, exit 0; the group is
	// left at once.
	stop()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("sink run exited %d after an interrupt, want 0:\n%s", c, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("sink run did not stop within 60s of its interrupt:\n%s", stderr.String())
	}
	errText := stderr.String()
	if !strings.Contains(errText, "stopped: 900 records committed") || !regexp.MustCompile(`lag 0 over 3 partitions`).MatchString(errText) {
		t.Errorf("sink run's stderr lacks the stop and lag 0:\n%s", errText)
	}
	lines := strings.Split(strings.TrimSpace(errText), "\n")
	t.Logf("sink run's last lines:\n%s", strings.Join(lines[max(0, len(lines)-3):], "\n"))
	e.wantRowsOnce(6 * perPartition)
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	groups, err := kadm.NewClient(adm).DescribeGroups(e.ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if gd := groups[group]; len(gd.Members) != 0 {
		t.Errorf("group %s still has members after the stop: %+v", group, gd.Members)
	}

	r := e.runWith(cfg, "sink", "status", e.name, "-o", "json").want(t, 0)
	var st sinkStatusJSON
	r.json(t, &st)
	if len(st.Partitions) != 3 || st.Lag == nil || *st.Lag != 0 || len(st.Branches) != 0 {
		t.Fatalf("status: %s", r)
	}
	for p, ps := range st.Partitions {
		end := int64(2 * perPartition)
		if ps.Partition != fmt.Sprintf("%s/%d", topic, p) || ps.Position != strconv.FormatInt(end, 10) || ps.End == nil || *ps.End != end ||
			ps.Lag == nil || *ps.Lag != 0 || ps.GroupOffset == nil || *ps.GroupOffset != end || ps.Epoch != 1 || ps.Owner != 1 {
			t.Errorf("partition %d: %+v, want position = end offset = group offset = %d, lag 0", p, ps, end)
		}
	}
	r = e.runWith(cfg, "sink", "status", e.name).want(t, 0)
	t.Logf("sink status:\n%s", r.stdout)
	if !slices.ContainsFunc(strings.Split(r.stdout, "\n"), func(l string) bool {
		return strings.HasPrefix(l, topic+"/0") && strings.Contains(l, " 300 ")
	}) {
		t.Errorf("status table lacks partition %s/0 at 300: %s", topic, r)
	}
}

// TestSinkConfigErrors: a sink that is not configured, or a sinks: section
// that is wrong, is a usage error (exit 2) naming the problem, for the
// sink commands and the others, before any database is contacted.
func TestSinkConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := "node: n1\nlog:\n  dir: " + dir + "/log\nparticipants:\n  - name: maria\n    driver: mysql\n    dsn: u@tcp(127.0.0.1:1)/db\n" +
		"sinks:\n  - name: orders\n    source: {kind: generator, records: 10}\n    targets: [maria]\n    tables:\n      - name: t\n        columns: {id: $.id}\n"
	write := func(name, text string) string {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.yaml", base)
	for _, cmd := range [][]string{{"sink", "run", "nope"}, {"sink", "status", "nope"}, {"sink", "setup", "nope"}} {
		xactl(t, append([]string{"--config", good}, cmd...)...).want(t, 2).stderrHas(t, `no sink "nope" in the configuration (orders are configured under sinks:)`)
	}
	for _, cmd := range [][]string{{"sink", "run"}, {"sink", "status", "a", "b"}, {"sink", "setup"}} {
		xactl(t, append([]string{"--config", good}, cmd...)...).want(t, 2)
	}
	for _, c := range []struct{ name, text, want string }{
		{"unknown target", strings.Replace(base, "targets: [maria]", "targets: [maria, pg]", 1), `sink "orders": targets: "pg" is not a configured participant`},
		{"bad column", strings.Replace(base, "{id: $.id}", "{id: '$.'}", 1), `sink "orders": table "t": column id: from "$."`},
		{"unknown key", strings.Replace(base, "    targets:", "    target: maria\n    targets:", 1), "field target not found"},
	} {
		path := write(c.name+".yaml", c.text)
		for _, cmd := range [][]string{{"sink", "run", "orders"}, {"sink", "status", "orders"}, {"sink", "setup", "orders"}, {"list"}, {"doctor"}} {
			r := xactl(t, append([]string{"--config", path}, cmd...)...).want(t, 2)
			r.stderrHas(t, c.want)
		}
	}
}

// sinkTablesConfig writes a configuration with the test's participants
// (more participants' YAML after them) and one sink named after the node:
// source and tables (with any more sink settings after them) are YAML
// indented under the sink, which writes to targets.
func (e *sinkEnv) sinkTablesConfig(file, participants, source, targets, tables string) string {
	e.t.Helper()
	var b strings.Builder
	b.WriteString(e.configText(""))
	b.WriteString(participants)
	fmt.Fprintf(&b, "sinks:\n  - name: %s\n    source:\n", e.name)
	for _, l := range strings.Split(strings.TrimSpace(source), "\n") {
		fmt.Fprintf(&b, "      %s\n", l)
	}
	fmt.Fprintf(&b, "    targets: [%s]\n    tables:\n", targets)
	b.WriteString(tables)
	return e.writeConfig(file, b.String())
}

// TestSinkDoctorTablesFit checks that doctor and setup compare the tables
// the sink writes with their catalogues — a mapped column the table lacks,
// an upsert key that is no unique key of the table — and that sink run
// refuses such a table up front, writing nothing. Found by an adversarial
// review: doctor said "present" (ok, exit 0) for both, and on MariaDB the
// upsert without its unique key inserted a row per record ("doctor (exit
// 0): table pg: events is "present" (ok), though the sink maps column
// nope, which it does not have"; "table maria: latest is "present" (ok),
// though its upsert key (p) is not a unique key of the table"; "upsert on
// key p (one partition, two records in two checkpoints) left 2 rows in
// latest, want 1").
func TestSinkDoctorTablesFit(t *testing.T) {
	e := newSinkEnv(t)
	e.logCommit()
	if err := e.my.Server.Exec(e.ctx, e.my.Name, "CREATE TABLE latest (p VARCHAR(64), seq BIGINT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	targets := myName + ", " + pgName
	tables := fmt.Sprintf(`      - target: %s
        name: latest
        columns: {p: partition, seq: $.seq}
        mode: upsert
        key: [p]
      - target: %s
        name: events
        columns: {id: $.id, p: partition, seq: $.seq, body: $, nope: $.v}
`, myName, pgName)
	cfg := e.sinkTablesConfig("cols.yaml", "", "kind: generator\nrecords: 10\npartitions: 2", targets, tables)
	r := e.runWith(cfg, "sink", "setup", e.name).want(t, 0)
	r.stdoutHas(t, "table "+pgName+": events: no column nope: fix it before xactl sink run")
	r.stdoutHas(t, "table "+myName+": latest: the upsert key (p) is not a unique key")
	r = e.runWith(cfg, "doctor", "-o", "json").want(t, 1)
	var out doctorJSON
	r.json(t, &out)
	fs := doctorFindings(out, "sink "+e.name)
	if f := fs["table "+pgName+": events"]; f.Severity != "FAIL" || f.Value != "present, but no column nope" || !strings.Contains(f.Fix, "add the column nope to events") {
		t.Errorf("doctor: table %s: events, which lacks the mapped column nope: %+v", pgName, f)
	}
	if f := fs["table "+myName+": latest"]; f.Severity != "FAIL" || !strings.Contains(f.Value, "the upsert key (p) is not a unique key") ||
		!strings.Contains(f.Fix, "ALTER TABLE latest ADD UNIQUE (p)") {
		t.Errorf("doctor: table %s: latest, whose upsert key (p) is no unique key: %+v", myName, f)
	}

	// sink run refuses the upsert without its unique key (on MariaDB it
	// would insert a row per record), before it writes anything.
	path := filepath.Join(e.dir, "up.ndjson")
	if err := os.WriteFile(path, []byte(`{"seq": 1}`+"\n"+`{"seq": 2}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	one := fmt.Sprintf(`      - target: %s
        name: latest
        columns: {p: partition, seq: $.seq}
        mode: upsert
        key: [p]
`, myName)
	cfg = e.sinkTablesConfig("upsert.yaml", "", "kind: file\npaths: ["+fmt.Sprintf("%q", path)+"]", targets, one)
	r = e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0").want(t, 1)
	r.stderrHas(t, "table latest: the upsert key (p) is not a unique key")
	r.stderrHas(t, "nothing was written")
	db, err := sql.Open("mysql", e.my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(e.ctx, "SELECT COUNT(*) FROM latest").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("sink run refused the table, but latest holds %d rows", n)
	}

	// With the unique key, it runs: one row per key.
	if err := e.my.Server.Exec(e.ctx, e.my.Name, "ALTER TABLE latest ADD UNIQUE (p)"); err != nil {
		t.Fatal(err)
	}
	e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0").want(t, 0)
	if err := db.QueryRowContext(e.ctx, "SELECT COUNT(*) FROM latest").Scan(&n); err != nil || n != 1 {
		t.Errorf("upsert on key p (one partition) left %d rows in latest (%v), want 1", n, err)
	}
}

// TestSinkStatusFileLag checks that sink status's lag of a file source
// counts records (its non-empty lines past the byte position), not bytes.
// Found by an adversarial review: the lag was the file's size minus the
// byte position, printed as records ("3 records not read yet; status
// says: Lag: 60 records over 1 partition.").
func TestSinkStatusFileLag(t *testing.T) {
	e := newSinkEnv(t)
	path := filepath.Join(e.dir, "in.ndjson")
	lines := `{"id": 1, "seq": 1}` + "\n" + `{"id": 2, "seq": 2}` + "\n\n" + `{"id": 3, "seq": 3}` + "\n"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	tables := fmt.Sprintf("      - target: %s\n        name: events\n        columns: {id: $.id, p: partition, seq: $.seq}\n", pgName)
	cfg := e.sinkTablesConfig("file.yaml", "", "kind: file\npaths: ["+fmt.Sprintf("%q", path)+"]", myName+", "+pgName, tables)
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)
	r := e.runWith(cfg, "sink", "status", e.name)
	t.Logf("sink status:\n%s", r.stdout)
	r.stdoutHas(t, "Lag: 3 records over 1 partition")
}

// TestSinkPreparedTransactionsDisabled checks that sink setup and sink run
// refuse up front, with the PostgreSQL driver's start-up check's message,
// a target whose max_prepared_transactions is 0 (it cannot prepare). Before,
// sink run refused it (the driver's check when the sink opens its targets)
// but sink setup did not: it created the bookkeeping tables and exited 0.
func TestSinkPreparedTransactionsDisabled(t *testing.T) {
	e := newSinkEnv(t)
	off := dbtest.NewPostgresServer(t, dbtest.Setting("max_prepared_transactions", "0")).CreateDB(t)
	if err := off.Server.Exec(e.ctx, off.Name, eventsDDL); err != nil {
		t.Fatal(err)
	}
	part := fmt.Sprintf("  - name: pgoff\n    driver: postgres\n    dsn: %s\n", strconv.Quote(off.DSN()))
	tables := "      - target: pgoff\n        name: events\n        columns: {id: $.id, p: partition, seq: $.seq}\n"
	cfg := e.sinkTablesConfig("off.yaml", part, "kind: generator\nrecords: 10", myName+", pgoff", tables)
	for _, cmd := range []string{"setup", "run"} {
		r := e.runWith(cfg, "sink", cmd, e.name).want(t, 1)
		for _, want := range []string{"sink " + e.name + ": sink: opening target pgoff", "max_prepared_transactions", "postgresql.conf"} {
			r.stderrHas(t, want)
		}
		t.Logf("sink %s: %s", cmd, r.stderr)
	}
	got, err := sqlsink.TablesExist(e.ctx, sqlsink.TargetConfig{Name: myName, Driver: sqlsink.DriverMySQL, DSN: e.my.DSN(), Init: true}, sqlsink.Tables())
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range sqlsink.Tables() {
		if got[tb] {
			t.Errorf("sink setup refused, but created %s", tb)
		}
	}
}

// TestSinkFileGrowing: a file source read while its writer appends to it
// (issue 13, item 5). The first run finds one whole line and half of the
// second (the writer has not finished it); the writer then finishes it
// and the second run reads on. Before, the half line was a record of its
// own, and the second run read the rest as another: 2 lines, 3 rows.
// Now a line is a record only once its line break is there: the first
// run writes 1 row and stops before the half line (its position does not
// pass it), says so, and the second run writes the second line whole.
func TestSinkFileGrowing(t *testing.T) {
	e := newSinkEnv(t)
	const ddl = "CREATE TABLE lines (p VARCHAR(255) NOT NULL, pos VARCHAR(32) NOT NULL, body TEXT NOT NULL)"
	if err := e.pg.Server.Exec(e.ctx, e.pg.Name, ddl); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.dir, "growing.ndjson")
	first, second := `{"id": 1, "v": "one"}`, `{"id": 2, "v": "two"}`
	half := len(second) / 2
	if err := os.WriteFile(path, []byte(first+"\n"+second[:half]), 0o644); err != nil {
		t.Fatal(err)
	}
	tables := fmt.Sprintf("      - target: %s\n        name: lines\n        columns: {p: partition, pos: position, body: $}\n", pgName)
	cfg := e.sinkTablesConfig("growing.yaml", "", "kind: file\npaths: ["+strconv.Quote(path)+"]", myName+", "+pgName, tables)
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0)

	r := e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0").want(t, 0)
	t.Logf("first run (the second line half written):\n%s", r.stderr)
	bodies := func() []string {
		c := e.pgConn()
		defer c.Close(context.Background())
		rows, err := c.Query(e.ctx, "SELECT body FROM lines ORDER BY pos::bigint")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var b string
			if err := rows.Scan(&b); err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	if got := bodies(); !slices.Equal(got, []string{first}) {
		t.Errorf("after the first run, lines holds %q; want only the whole line %q", got, first)
	}
	firstRun := r

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(second[half:] + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r = e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0").want(t, 0)
	t.Logf("second run (the line finished):\n%s", r.stderr)
	if got := bodies(); !slices.Equal(got, []string{first, second}) {
		t.Fatalf("2 lines written, lines holds %d rows: %q; want %q and %q, once each", len(got), got, first, second)
	}
	r = e.runWith(cfg, "sink", "status", e.name, "-o", "json").want(t, 0)
	var st sinkStatusJSON
	r.json(t, &st)
	fi, _ := os.Stat(path)
	if len(st.Partitions) != 1 || st.Partitions[0].Position != strconv.FormatInt(fi.Size(), 10) || st.Lag == nil || *st.Lag != 0 {
		t.Errorf("status after both lines: %s", r)
	}
	// The first run said what it left.
	firstRun.stderrHas(t, "1 record committed in", "without its line break")
}

// TestSinkIdentity: xactl's sink commands refuse a configuration whose
// target reaches another database than the one the sink was set up with
// (issue 13), and show a target taken out of the sink's targets. The sink
// is set up and run; then participant pg's DSN reaches another database
// of the server, which holds a table events too: sink status, sink run
// and sink setup exit 3 saying which database was expected, and doctor
// fails the sink's identity check; nothing is written there. Then pg is
// taken out of the sink's targets (still a participant): sink status
// exits 3 naming it, and sink setup --forget-target pg, finding none of
// the sink's branches prepared there, forgets it: status exits 0.
func TestSinkIdentity(t *testing.T) {
	e := newSinkEnv(t)
	src := "kind: generator\nrecords: 300\npartitions: 2"
	cfg := e.sinkConfig("sink.yaml", src, "    checkpoint: {records: 100, interval: 100ms}\n")
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0).stdoutHas(t, "Bound to the progress target "+myName+" now: "+myName+", "+pgName)
	e.runWith(cfg, "sink", "setup", e.name).want(t, 0).stdoutHas(t, "Bound already: "+myName+", "+pgName)
	e.runWith(cfg, "sink", "run", e.name, "--progress-every", "0").want(t, 0)
	e.wantRowsOnce(300)

	other := dbtest.PostgresDB(t)
	if err := other.Server.Exec(e.ctx, other.Name, eventsDDL); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wrong := e.writeConfig("wrong.yaml", strings.Replace(string(text), strconv.Quote(e.pg.DSN()), strconv.Quote(other.DSN()), 1))
	// Without a participant identity, the driver refuses the other
	// database at once.
	r := e.runWith(wrong, "sink", "status", e.name).want(t, 3)
	r.stdoutHas(t, "IDENTITY MISMATCH", "participant \"pg\": the database has no identity")
	// Given one (an operator's xactl participant init, taking it for a new
	// participant), the sink's bindings refuse it.
	e.runWith(wrong, "participant", "init", pgName).want(t, 0)
	r = e.runWith(wrong, "sink", "status", e.name).want(t, 3)
	t.Logf("sink status with pg on another database:\n%s%s", r.stdout, r.stderr)
	r.stdoutHas(t, "IDENTITY MISMATCH", "target pg of sink "+e.name, e.pg.Name)
	r = e.runWith(wrong, "sink", "run", e.name, "--progress-every", "0").want(t, 3)
	t.Logf("sink run with pg on another database:\n%s", r.stderr)
	r.stderrHas(t, "holds no binding of the sink", e.pg.Name, "nothing was written or resolved")
	r = e.runWith(wrong, "sink", "setup", e.name).want(t, 3)
	r.stderrHas(t, "holds no binding of the sink", e.pg.Name)
	r = e.runWith(wrong, "doctor", "-o", "json").want(t, 1)
	var out doctorJSON
	r.json(t, &out)
	if f, ok := doctorFindings(out, "sink "+e.name)["identity (bindings)"]; !ok || f.Severity != "FAIL" || !strings.Contains(f.Value, e.pg.Name) {
		t.Errorf("doctor's identity finding with pg on another database: %+v", f)
	}
	if n := e.countOn(other, "SELECT count(*) FROM events"); n != 0 {
		t.Errorf("the other database's events: %d rows, want none", n)
	}

	// pg taken out of the sink's targets.
	tables := fmt.Sprintf("      - target: %s\n        name: events\n        columns: {id: $.id, p: partition, seq: $.seq, body: $}\n", myName)
	without := e.sinkTablesConfig("without.yaml", "", src, myName, tables)
	r = e.runWith(without, "sink", "status", e.name).want(t, 3)
	t.Logf("sink status with pg out of the targets:\n%s", r.stdout)
	r.stdoutHas(t, "Target pg (PostgreSQL database "+e.pg.Name, "no longer among its targets")
	e.runWith(without, "sink", "setup", e.name, "--forget-target", myName).want(t, 2)
	e.runWith(without, "sink", "setup", e.name, "--forget-target", pgName).want(t, 0).stdoutHas(t, "Target pg is forgotten")
	e.runWith(without, "sink", "status", e.name).want(t, 0)
}

// countOn runs a count query on a PostgreSQL database.
func (e *sinkEnv) countOn(db *dbtest.DB, q string) int {
	e.t.Helper()
	c, err := pgx.Connect(e.ctx, db.DSN())
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(e.ctx, q).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}
