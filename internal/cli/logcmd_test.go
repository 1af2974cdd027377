package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xadb/xa/recovery/filelog"
	"github.com/xadb/xa/xa"
)

type tornJSON struct {
	File    string `json:"file"`
	Offset  int64  `json:"offset"`
	Bytes   int64  `json:"bytes"`
	Reason  string `json:"reason"`
	Meaning string `json:"meaning"`
}

type verifyJSON struct {
	Dir            string         `json:"dir"`
	Identity       *identityJSON  `json:"identity"`
	InUse          bool           `json:"in_use"`
	Segments       int            `json:"segments"`
	Records        map[string]int `json:"records"`
	SyncMarks      int            `json:"sync_marks"`
	LiveCommits    int            `json:"live_commits"`
	LiveAborts     int            `json:"live_aborts"`
	Delegations    int            `json:"delegations"`
	LiveHeuristics int            `json:"live_heuristics"`
	Corruption     []string       `json:"corruption"`
	TornTail       *tornJSON      `json:"torn_tail"`
	OK             *bool          `json:"ok"`
}

// logOnly writes a configuration naming only a node and a decision log
// (log dump and verify need no participants), creates the log, and returns
// the configuration's path, the log directory and the log's identity.
func logOnly(t *testing.T) (cfg, dir string, ident xa.LogIdentity) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "log")
	cfg = filepath.Join(base, "xactl.yaml")
	if err := os.WriteFile(cfg, []byte("node: n1\nlog:\n  dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ident, err := xa.NewLogIdentity("n1", 0, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	l, err := filelog.Create(dir, ident, filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return cfg, dir, l.Identity()
}

// fakeRecord is a commit record of node whose branches nobody prepared.
func fakeRecord(t *testing.T, node string) xa.CommitRecord {
	t.Helper()
	g, err := xa.NewGlobalID(node, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return xa.CommitRecord{ID: g, Logged: time.Now(), Branches: []xa.BranchRecord{{RM: myName, XID: g.Branch(0)}, {RM: pgName, XID: g.Branch(1)}}}
}

// TestLogHealthy: log verify says ok, shows the identity and counts the
// records; log dump shows the identity and every record in order with what
// is still live; --live only those.
func TestLogHealthy(t *testing.T) {
	t.Parallel()
	cfg, dir, ident := logOnly(t)
	ctx := context.Background()
	a, b := fakeRecord(t, "n1"), fakeRecord(t, "n1")
	h := xa.HeuristicRecord{RM: pgName, XID: a.Branches[1].XID, Action: xa.OutcomeRollback, Forced: true, Time: time.Now(), Reason: "test"}
	l, err := filelog.Open(dir, filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []xa.CommitRecord{a, b} {
		if err := l.LogCommit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Forget(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := l.LogHeuristic(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	r := xactl(t, "--config", cfg, "log", "verify", "-o", "json").want(t, 0)
	var v verifyJSON
	r.json(t, &v)
	if v.OK == nil || !*v.OK || len(v.Corruption) != 0 || v.TornTail != nil || v.Dir != dir || v.Segments < 1 || v.InUse {
		t.Errorf("verify of a healthy log: %+v", v)
	}
	if v.Records["commit"] != 2 || v.Records["forget"] != 1 || v.Records["heuristic"] != 1 || v.Records["clear"] != 0 || v.LiveCommits != 1 || v.LiveHeuristics != 1 {
		t.Errorf("verify counts: records %v, live %d commit %d heuristic; want 2/1/1/0, 1, 1", v.Records, v.LiveCommits, v.LiveHeuristics)
	}
	if id := v.Identity; id == nil || id.ID != ident.ID.String() || id.Node != "n1" || id.Timeout != ident.Timeout.String() || id.Grace != ident.Grace.String() || id.Created == "" {
		t.Errorf("verify's identity: %+v, want %+v", v.Identity, ident)
	}
	xactl(t, "--config", cfg, "log", "verify").want(t, 0).stdoutHas(t, "2 commit, 1 forget, 1 heuristic", "ok",
		"id "+ident.ID.String(), "node n1", "timeout "+ident.Timeout.String(), "grace "+ident.Grace.String())

	r = xactl(t, "--config", cfg, "log", "dump", "-o", "json").want(t, 0)
	var d dumpJSON
	r.json(t, &d)
	type rec struct {
		typ, id string
		live    bool
	}
	var got []rec
	for _, x := range d.Records {
		id := x.GlobalID
		if id == "" {
			id = x.XID
		}
		got = append(got, rec{x.Type, id, x.Live})
	}
	want := []rec{{"identity", "", true}, {"commit", a.ID.String(), false}, {"commit", b.ID.String(), true}, {"forget", a.ID.String(), false}, {"heuristic", h.XID.String(), true}}
	if len(got) != len(want) {
		t.Fatalf("log dump records %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("log dump record %d = %v, want %v", i, got[i], want[i])
		}
	}
	if d.Error != "" {
		t.Errorf("log dump of a healthy log reports %q", d.Error)
	}
	if d.Records[0].Detail["id"] != ident.ID.String() {
		t.Errorf("log dump's identity entry: %+v", d.Records[0])
	}
	// --marks adds the sync marks; the last, written by Close, covers
	// everything before it.
	r = xactl(t, "--config", cfg, "log", "dump", "--marks", "-o", "json").want(t, 0)
	var dm dumpJSON
	r.json(t, &dm)
	if n := len(dm.Records); n != len(want)+v.SyncMarks || v.SyncMarks == 0 || dm.Records[n-1].Type != "synced" ||
		dm.Records[n-1].Detail["synced_to"] != strconv.FormatInt(dm.Records[n-1].Offset, 10) {
		t.Errorf("log dump --marks: %+v (verify counts %d sync marks); want the records and the sync marks, the last covering all before it",
			dm.Records, v.SyncMarks)
	}
	if br := d.Records[2].Branches; len(br) != 2 || !strings.Contains(br[0], myName+" "+b.Branches[0].XID.String()) {
		t.Errorf("commit record branches shown as %q", br)
	}
	r = xactl(t, "--config", cfg, "log", "dump", "--live", "-o", "json").want(t, 0)
	d = dumpJSON{}
	r.json(t, &d)
	if len(d.Records) != 3 || d.Records[0].Type != "identity" || d.Records[1].GlobalID != b.ID.String() || d.Records[2].XID != h.XID.String() {
		t.Errorf("log dump --live: %+v, want the identity, the commit of %s and the heuristic of %s", d.Records, b.ID, h.XID)
	}
	xactl(t, "--config", cfg, "log", "dump").want(t, 0).stdoutHas(t, "TYPE", b.ID.String(), "heuristic")

	// Both read while a transaction manager has the log open.
	l, err = filelog.Open(dir, filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r = xactl(t, "--config", cfg, "log", "verify", "-o", "json").want(t, 0)
	v = verifyJSON{}
	r.json(t, &v)
	if !v.InUse || !*v.OK {
		t.Errorf("verify of a log in use: in_use %v, ok %v; want true, true", v.InUse, *v.OK)
	}
	xactl(t, "--config", cfg, "log", "dump", "--live").want(t, 0).stdoutHas(t, b.ID.String())

	// No log directory configured: usage error.
	xactl(t, "--config", filepath.Join(t.TempDir(), "missing.yaml"), "log", "verify").want(t, 2)
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	xactl(t, "--config", empty, "log", "dump").want(t, 2).stderrHas(t, "log.dir")
}

// lastRecord returns the path, offset and size of the log's last record.
func lastRecord(t *testing.T, dir string) (path string, off int64, size int) {
	t.Helper()
	var last filelog.Entry
	if err := filelog.Dump(dir, func(e filelog.Entry) error { last = e; return nil }); err != nil {
		t.Fatal(err)
	}
	if last.Size == 0 {
		t.Fatal("the log has no records")
	}
	return filepath.Join(dir, last.File), last.Offset, last.Size
}

// TestLogTornTail: a last segment cut in the middle of its last record (a
// crash during the write) is reported as a torn tail, exit 0; recovery
// works after it: the transaction whose record survives is committed, the
// one whose record was torn (never acknowledged) is rolled back.
func TestLogTornTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kept := e.prepare(1)
	torn := e.prepare(3)
	prepared := time.Now()
	e.logCommit(kept.record(), torn.record())
	path, off, size := lastRecord(t, e.logDir)
	if err := os.Truncate(path, off+int64(size)/2); err != nil {
		t.Fatal(err)
	}

	r := e.run("log", "verify", "-o", "json").want(t, 0)
	var v verifyJSON
	r.json(t, &v)
	if tt := v.TornTail; tt == nil || tt.File == "" || tt.Bytes <= 0 || tt.Offset != off || !strings.Contains(tt.Meaning, "harmless") ||
		!strings.Contains(tt.Meaning, "acknowledged commits may be lost") || !*v.OK || len(v.Corruption) != 0 || v.LiveCommits != 1 {
		t.Errorf("verify of a torn log: %+v (torn tail %+v); want a torn tail at %d saying both what it means, ok, 1 live commit", v, v.TornTail, off)
	}
	// Both meanings, in words: harmless after a crash during a write; for
	// a copy of a log (restored, truncated), acknowledged commits may be
	// lost. No Go struct literal.
	r = e.run("log", "verify").want(t, 0)
	r.stdoutHas(t, "torn tail", "harmless", "crash during a write", "copy of a log", "acknowledged commits may be lost")
	if strings.Contains(r.stdout, "{") || strings.Contains(r.stdout, "File:") {
		t.Errorf("log verify prints a Go struct: %s", r)
	}
	if live := e.liveRecords(); len(live) != 1 || live[0] != kept.id.String() {
		t.Errorf("records after the tear: %v, want [%s]", live, kept.id)
	}

	e.waitDetached(kept, torn)
	ageBeyond(prepared, time.Second)
	cfg := e.logGraceConfig()
	e.recoverForgetting(cfg, kept.id.String())
	e.wantRows(1, true, true)
	e.wantRows(3, false, false)
	e.wantPrepared(kept, false, false)
	e.wantPrepared(torn, false, false)

	// Open cut the torn tail off.
	r = e.run("log", "verify", "-o", "json").want(t, 0)
	v = verifyJSON{}
	r.json(t, &v)
	if v.TornTail != nil || !*v.OK || v.LiveCommits != 0 {
		t.Errorf("verify after recovery: %+v; want no torn tail, ok, no live commit", v)
	}
}

// snapshot reads every file of dir.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, en := range ents {
		b, err := os.ReadFile(filepath.Join(dir, en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[en.Name()] = b
	}
	return out
}

// TestLogCorrupt: a byte flipped in the middle of a record that has valid
// records after it is corruption: log verify says CORRUPT and exits 1, log
// dump shows what it can and exits 1, recover, commit, list and doctor
// refuse with a clear error, and no file of the log changes.
func TestLogCorrupt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	recs := []xa.CommitRecord{fakeRecord(t, e.node), fakeRecord(t, e.node), fakeRecord(t, e.node)}
	e.logCommit(recs...)
	var first filelog.Entry
	err := filelog.Dump(e.logDir, func(en filelog.Entry) error {
		if first.Size == 0 && en.Type != filelog.RecordIdentity {
			first = en
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.logDir, first.File)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[first.Offset+int64(first.Size)/2] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, e.logDir)

	r := e.run("log", "verify").want(t, 1)
	r.stdoutHas(t, "CORRUPT", first.File)
	r.stderrHas(t, "corrupt", "do not delete records")
	r = e.run("log", "verify", "-o", "json").want(t, 1)
	var v verifyJSON
	r.json(t, &v)
	if *v.OK || len(v.Corruption) == 0 || v.TornTail != nil {
		t.Errorf("verify of a corrupt log: %+v; want ok false, corruption, no torn tail", v)
	}

	r = e.run("log", "dump", "-o", "json").want(t, 1)
	r.stderrHas(t, "damaged", "log verify")
	var d dumpJSON
	r.json(t, &d)
	if d.Error == "" || len(d.Records) != 3 || d.Records[0].Type != "identity" || d.Records[1].GlobalID != recs[1].ID.String() || d.Records[2].GlobalID != recs[2].ID.String() {
		t.Errorf("log dump of a corrupt log: %+v; want the identity, the two records past the damage and an error", d)
	}

	r = e.run("recover").want(t, 1)
	// The error names the damage, the directory, and what to do.
	r.stderrHas(t, "corrupt", first.File, e.logDir, "nothing was changed", "xactl log verify")
	e.run("recover", "--dry-run").want(t, 1).stderrHas(t, "corrupt", "xactl log verify")
	e.run("list").want(t, 1).stderrHas(t, "corrupt", "xactl log verify")
	e.run("commit", recs[0].Branches[0].XID.String()).want(t, 1).stderrHas(t, "corrupt", "xactl log verify")
	r = e.run("doctor", "-o", "json").want(t, 1)
	if !strings.Contains(r.stdout, "corrupt") {
		t.Errorf("doctor does not report the corruption: %s", r)
	}

	after := snapshot(t, e.logDir)
	if len(after) != len(before) {
		t.Errorf("log files before %d, after %d", len(before), len(after))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Errorf("%s changed", name)
		}
	}
}
