package sqlsink_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xadb/xa/sink/filesource"
	"github.com/xadb/xa/sink/sqlsink"
)

// TestDeadLetters: with OnErrorDeadLetter, the records that cannot be
// mapped (not JSON, a required path missing, a fraction for an integer
// column) go to the dead-letter table of the progress target, once each,
// with their partition, position, key and value bytes and the error, and
// every other record of both partitions lands in both databases (issue
// 18, item 2). A second run over the same files writes nothing more. With
// MaxDeadLetters 1, a checkpoint holding 3 bad records aborts with
// ErrTooManyDeadLetters and nothing lands. With the default (stop), the
// first bad record stops the run and nothing of its checkpoint lands.
// Run with the progress target on each database.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	for _, progress := range progressTargets {
		t.Run("progress="+progress, func(t *testing.T) {
			t.Parallel()
			testDeadLetters(t, progress)
		})
	}
}

func testDeadLetters(t *testing.T, progress string) {
	e := newEnvOn(t, progress)
	ctx := testCtx(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.ndjson"), filepath.Join(dir, "b.ndjson")
	lines := map[string][]string{
		a: {`{"id": 1, "v": "one"}`, `not json`, `{"id": 2, "v": "two"}`, `{"v": "no id"}`},
		b: {`{"id": 3, "v": "three"}`, `{"id": 1.5, "v": "a fraction"}`, `{"id": 4, "v": "four"}`},
	}
	for path, ls := range lines {
		if err := os.WriteFile(path, []byte(strings.Join(ls, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range e.cfg.Tables {
		e.cfg.Tables[i].Required = []string{"k"}
	}
	run := func(onError sqlsink.OnError, max int) error {
		t.Helper()
		e.cfg.OnError, e.cfg.MaxDeadLetters = onError, max
		src, err := filesource.New(filesource.Config{Files: []string{a, b}})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		s := e.open()
		defer s.Close()
		opts := runOpts()
		opts.MaxAborts = 1
		return s.Run(ctx, src, opts)
	}
	progressCfg := e.progress()

	// Stop (the default): the run stops, nothing lands.
	err := run("", 0)
	var me *sqlsink.MappingError
	if !errors.As(err, &me) {
		t.Fatalf("on_error stop: %v; want the bad record's *MappingError", err)
	}
	t.Logf("on_error stop: %v", err)
	if my, pg := e.counts(); my.rows != 0 || pg.rows != 0 {
		t.Fatalf("on_error stop: %v and %v landed; want nothing", my, pg)
	}
	// A systematic failure: more bad records than allowed.
	if err := run(sqlsink.OnErrorDeadLetter, 1); !errors.Is(err, sqlsink.ErrTooManyDeadLetters) {
		t.Fatalf("MaxDeadLetters 1: %v; want ErrTooManyDeadLetters", err)
	} else {
		t.Logf("MaxDeadLetters 1: %v", err)
	}
	if dl, err := sqlsink.ReadDeadLetters(ctx, progressCfg, e.name, 0); err != nil || len(dl) != 0 {
		t.Fatalf("dead letters after the aborted run: %+v, %v; want none", dl, err)
	}

	// Dead letters: the good records land, the bad ones are dead letters.
	for range 2 {
		if err := run(sqlsink.OnErrorDeadLetter, 0); err != nil {
			t.Fatal(err)
		}
		my, pg := e.counts()
		if my.rows != 4 || my.distinct != 4 || pg.rows != 4 || pg.distinct != 4 {
			t.Fatalf("%s holds %v, %s %v; want the 4 good records once each", tgMy, my, tgPg, pg)
		}
		dl, err := sqlsink.ReadDeadLetters(ctx, progressCfg, e.name, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range dl {
			got = append(got, filepath.Base(d.Partition)+"@"+d.Position+" "+string(d.Value))
			if d.Error == "" || d.Created.IsZero() {
				t.Errorf("dead letter %+v lacks its error or time", d)
			}
		}
		slices.Sort(got)
		want := []string{"a.ndjson@31 not json", "a.ndjson@68 {\"v\": \"no id\"}", "b.ndjson@55 {\"id\": 1.5, \"v\": \"a fraction\"}"}
		if !slices.Equal(got, want) {
			t.Fatalf("dead letters %q; want %q, once each", got, want)
		}
		for _, d := range dl {
			t.Logf("dead letter %s@%s: %s", d.Partition, d.Position, d.Error)
		}
	}
}
