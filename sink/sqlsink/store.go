package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xadb/xa/xa"
)

// This file holds what the dialects' stores share: the values they pass
// (keys, what a key holds, the refusals of register), the text of a
// decision's origins, and the scanning of the rows both pools read.

// errEpochMoved: the decision found a partition without the epoch and
// owner it was written under.
var errEpochMoved = errors.New("sink: a partition's epoch or owner moved on")

// checkpointKey is the key of a checkpoint in xa_sink_decisions: the
// incarnation field and the checkpoint number of its XIDs.
type checkpointKey struct{ incarnation, checkpoint uint64 }

// stored is what the progress target holds under a checkpoint's key: a
// commit decision, with where its branches were prepared, or an abort
// marker.
type stored struct {
	aborted bool
	origins string // see encodeOrigins
}

// Errors of register: the generation is below the highest registered, or
// the member registered this generation already.
var (
	errGenerationStale  = errors.New("sink: a later generation is registered")
	errGenerationReused = errors.New("sink: the member registered this generation already")
)

// generationError is register's refusal.
type generationError struct {
	reason  error // errGenerationStale or errGenerationReused
	highest uint32
}

func (e *generationError) Error() string {
	return fmt.Sprintf("%v (the highest generation registered for the sink is %d)", e.reason, e.highest)
}

func (e *generationError) Unwrap() error { return e.reason }

// lowWord masks an external incarnation's generation.
const lowWord = 1<<32 - 1

// encodeOrigins writes where each MySQL branch was prepared, for phase two
// from another session: "target=session:unixnano;...". Targets without an
// origin are left out.
func encodeOrigins(bs []BranchState) string {
	var parts []string
	for _, b := range bs {
		if b.Session == 0 && b.Prepared.IsZero() {
			continue
		}
		var ns int64
		if !b.Prepared.IsZero() {
			ns = b.Prepared.UnixNano()
		}
		parts = append(parts, b.Target+"="+strconv.FormatUint(b.Session, 10)+":"+strconv.FormatInt(ns, 10))
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

// decodeOrigins reads encodeOrigins; malformed entries are skipped (phase
// two then waits as for an unknown origin).
func decodeOrigins(s string) map[string]xa.Origin {
	out := map[string]xa.Origin{}
	for _, p := range strings.Split(s, ";") {
		name, v, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		sess, at, ok := strings.Cut(v, ":")
		if !ok {
			continue
		}
		id, err1 := strconv.ParseUint(sess, 10, 64)
		ns, err2 := strconv.ParseInt(at, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		o := xa.Origin{Session: id}
		if ns != 0 {
			o.Prepared = time.Unix(0, ns)
		}
		out[name] = o
	}
	return out
}

// openStore opens the store of target c's dialect (dialectFor).
func openStore(ctx context.Context, c TargetConfig) (store, error) {
	d, err := dialectFor(c.kind())
	if err != nil {
		return nil, err
	}
	return d.open(ctx, c)
}

// withStore validates c, opens its store for f and closes it after.
func withStore(ctx context.Context, c TargetConfig, f func(store) error) error {
	if err := c.validate(); err != nil {
		return err
	}
	st, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer st.close()
	return f(st)
}

// maxSelfIncarnation bounds self-driven incarnations (external ones carry
// bit 62).
const maxSelfIncarnation = int64(externalBit)

// querier runs a query of the store's dialect: its rows, and how to
// close them.
type querier func(ctx context.Context, q string, args ...any) (rows, func(), error)

// readStatus reads a sink's progress rows (progressQ: partition,
// position, epoch, owner, checkpoint, updated) and instance rows
// (instancesQ: incarnation, started, host, pid), each a statement of the
// dialect whose one parameter is the sink, and counts the partitions each
// instance owns.
func readStatus(ctx context.Context, sink string, q querier, progressQ, instancesQ string) (Status, error) {
	st := Status{Sink: sink}
	rs, done, err := q(ctx, progressQ, sink)
	if err != nil {
		return st, err
	}
	st.Partitions, err = scanPartitions(rs)
	done()
	if err != nil {
		return st, err
	}
	rs, done, err = q(ctx, instancesQ, sink)
	if err != nil {
		return st, err
	}
	defer done()
	st.Instances, err = scanInstances(rs)
	countOwned(&st)
	return st, err
}

func countOwned(s *Status) {
	n := map[uint64]int{}
	for _, p := range s.Partitions {
		n[p.Owner]++
	}
	for i := range s.Instances {
		s.Instances[i].Partitions = n[s.Instances[i].Incarnation]
	}
}

// scanPartitions reads rows of (partition, position, epoch, owner,
// checkpoint, updated).
func scanPartitions(rs rows) ([]PartitionStatus, error) {
	var out []PartitionStatus
	for rs.Next() {
		var p PartitionStatus
		var owner, cp int64
		if err := rs.Scan(&p.Partition, &p.Position, &p.Epoch, &owner, &cp, &p.Updated); err != nil {
			return nil, err
		}
		p.Owner, p.Checkpoint = uint64(owner), uint64(cp)
		out = append(out, p)
	}
	return out, rs.Err()
}

// scanStored reads rows of (incarnation, checkpoint, aborted, origins)
// into out.
func scanStored(rs rows, out map[checkpointKey]stored) error {
	for rs.Next() {
		var i, c int64
		var row stored
		if err := rs.Scan(&i, &c, &row.aborted, &row.origins); err != nil {
			return err
		}
		out[checkpointKey{uint64(i), uint64(c)}] = row
	}
	return rs.Err()
}

// scanOwners reads rows of one owner each.
func scanOwners(rs rows) (map[uint64]bool, error) {
	out := map[uint64]bool{}
	for rs.Next() {
		var o int64
		if err := rs.Scan(&o); err != nil {
			return nil, err
		}
		out[uint64(o)] = true
	}
	return out, rs.Err()
}

// scanInstances reads rows of (incarnation, started, host, pid).
func scanInstances(rs rows) ([]InstanceStatus, error) {
	var out []InstanceStatus
	for rs.Next() {
		var in InstanceStatus
		var inc int64
		var pid int32
		if err := rs.Scan(&inc, &in.Started, &in.Host, &pid); err != nil {
			return nil, err
		}
		in.Incarnation, in.PID = uint64(inc), int(pid)
		out = append(out, in)
	}
	return out, rs.Err()
}

// scanBindings reads rows of (target, target_id, progress_id,
// participant_id, target_where, progress_where, bound) of sink.
func scanBindings(rs rows, sink string) (map[string]binding, error) {
	out := map[string]binding{}
	for rs.Next() {
		b := binding{sink: sink}
		if err := rs.Scan(&b.target, &b.targetID, &b.progressID, &b.participantID, &b.where, &b.progressWhere, &b.bound); err != nil {
			return nil, err
		}
		out[b.target] = b
	}
	return out, rs.Err()
}
