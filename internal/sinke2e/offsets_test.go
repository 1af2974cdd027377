package sinke2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestGroupOffsetsAfterRebalance: the Kafka group's committed offsets are
// a copy of the progress table, kept "so that lag tools work"
// (docs/sink.md, step 5). Worker A holds one open checkpoint over every
// partition (no record count or interval ends it); B joins; the
// rebalance revokes half of A's partitions, and A's Revoked finishes the
// checkpoint (it commits) before it lets them go. Once the sink has
// caught up and nothing more is produced, the group's offsets must equal
// the progress table.
//
// It found a bug, fixed since: the Runner acknowledges a checkpoint
// finished inside Revoked from within the handler, and kafkasource refused
// Committed during Poll ("kafkasource: called during Poll"); the Runner
// logged it and dropped the positions, so the group kept no offset (or a
// stale one) for every partition of that checkpoint until a later
// checkpoint covered it again — for ever if no record came.
func TestGroupOffsetsAfterRebalance(t *testing.T) {
	r := newRig(t, rigOpts{progress: tgMy})
	ctx := ctxFor(t, 5*time.Minute)
	if _, err := r.produce(ctx, 4000); err != nil {
		t.Fatal(err)
	}
	ends := r.endOffsets(ctx)
	long := r.spec
	long.CheckpointRecords, long.CheckpointInterval, long.MaxPollRecords = 1_000_000, time.Hour, 0
	a := r.start(long)
	a.ready()
	waitFor(t, 30*time.Second, "A holding partitions", func() bool { return a.assigned() != 0 })
	time.Sleep(2 * time.Second) // A reads everything into its open checkpoint
	b := r.start(r.spec)
	waitFor(t, time.Minute, "the checkpoint A finished in Revoked", func() bool { return r.caughtUp(ctx, ends) })
	time.Sleep(2 * time.Second)
	pos, _, err := r.positions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kadm.NewClient(r.prod).FetchOffsets(ctx, r.group)
	if err == nil {
		err = got.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	var diffs []string
	for _, p := range partitions {
		var n int32
		fmt.Sscanf(strings.TrimPrefix(p, topic+"/"), "%d", &n)
		at := int64(-1)
		if o, ok := got.Lookup(topic, n); ok {
			at = o.At
		}
		if at != pos[p] {
			diffs = append(diffs, fmt.Sprintf("%s: group %d, progress %d", p, at, pos[p]))
		}
	}
	t.Logf("A's warnings: %q", a.grep("acknowledging committed positions"))
	a.stop()
	b.stop()
	if len(diffs) > 0 {
		t.Fatalf("the group's committed offsets differ from the progress table (-1: none): %s", strings.Join(diffs, "; "))
	}
}
