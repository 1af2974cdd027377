// Package kafkasource is the Kafka source of the exactly-once sink: a
// sink.Source over a Kafka consumer group (franz-go's kgo client).
//
// Partitions are named "<topic>/<partition>" ("events/3"); a position is the
// decimal offset of the next record to read, so a record's Next is its
// offset + 1.
//
// # Ownership, and where reading starts
//
// The group rebalances cooperatively (kgo.CooperativeStickyBalancer): a
// rebalance revokes only the partitions that move. Offsets are never
// committed automatically. When the group hands this member partitions, the
// source calls Handler.Assigned and reads each partition from the position
// the handler returned; the group's committed offset is used only for a
// partition the handler returned no position for (Config.Start says which).
// The seek is done by kgo's AdjustFetchOffsetsFn, which runs after the
// assignment callback and before the first fetch of the partition, so no
// fetch ever starts below the handler's position; Poll also drops any record
// below the last position it was told of (the handler's, a Seek's, or the
// last record it returned), so a record is never returned twice or below
// the position, whatever the client buffered.
//
// # When the handler runs
//
// kgo runs its rebalance callbacks on its own goroutine. The source makes
// them run only while the sink's goroutine is inside Poll, and Poll does not
// return while one runs:
//
//   - kgo.BlockRebalanceOnPoll: once Poll has returned records, kgo holds
//     every rebalance step (revoking, assigning, giving up a lost
//     assignment) until the next Poll calls AllowRebalance;
//   - a gate of the source's own, held by the sink's goroutine whenever it is
//     outside Poll: a callback takes the gate before it calls the handler.
//     The gate covers what kgo's block does not: the first assignment
//     (before any Poll), and a poll that returned no records.
//
// So Revoked is told before the partition is given away (cooperative
// rebalancing gives a partition to another member only after this member
// rejoins, which it does after its revoke callback returned), the handler
// never runs concurrently with the sink's own work, and after Revoked
// returned no record of the partition is returned (kgo drops buffered
// records of revoked partitions before the callback; Poll also drops records
// of partitions the handler does not own).
//
// The handler's calls get a context that ends when the source is closed. A
// Poll whose ctx ends while a handler call runs returns after the call.
// Close does not call the handler: the sink finishes or aborts its
// checkpoint before it closes the source. During a rebalance the sink must
// Poll, and Assigned and Revoked must return, within the rebalance timeout,
// or the group throws the member out (below).
//
// # Zombies
//
// A member that stops heartbeating (a process stopped with SIGSTOP, a long
// GC pause, a network partition) is thrown out of the group after the
// session timeout; a member that heartbeats but does not take part in a
// rebalance (its sink does not Poll) is thrown out after the rebalance
// timeout. Its partitions go to other members, whose sinks raise the
// partitions' epochs. When it runs and polls again, it may first return
// records kgo fetched before it noticed (the sink cannot commit them: their
// epochs moved on; nor can the source commit the group's offsets: the group
// refuses the member). As soon as kgo notices (a heartbeat, or the rejoin),
// the handler is told the partitions are lost (LostHandler.Lost if the
// handler has it, else Handler.Revoked), no record of them is returned
// after that, and the member rejoins; Stats counts the losses. A partition
// the member gets back at once under its new member ID, which kgo would
// neither revoke nor assign, is told lost and assigned again like the
// others. The sink's own guarantee does not depend on these notices: a
// zombie cannot decide a checkpoint once the new owner raised the epochs.
package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xadb/xa/sink"
)

// StartAt says where a partition is read from when the handler returned no
// position for it.
type StartAt int

const (
	// StartCommitted reads from the group's committed offset, or from the
	// start of the partition if the group has none.
	StartCommitted StartAt = iota
	// StartEarliest reads from the start of the partition, whatever the
	// group committed.
	StartEarliest
)

// Config configures a Source.
type Config struct {
	// Brokers are the seed brokers ("host:port").
	Brokers []string
	// Group is the consumer group. Every instance of one sink uses the same.
	Group string
	// Topics are read whole (every partition).
	Topics []string
	// ClientID names the client to the brokers (kgo's default if empty).
	ClientID string
	// Start says where a partition starts that the handler returned no
	// position for.
	Start StartAt
	// SessionTimeout, RebalanceTimeout and HeartbeatInterval override kgo's
	// defaults (45 s, 60 s, 3 s) when set. A member that does not heartbeat
	// for the session timeout, or does not rejoin a rebalance (its sink does
	// not Poll) within the rebalance timeout, is thrown out of the group.
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	// MaxPollRecords bounds the records one Poll returns (0: all buffered).
	MaxPollRecords int
	// Logf, if set, is told of assignments, revocations, losses and group
	// errors.
	Logf func(format string, args ...any)
	// Options are more kgo options (TLS, SASL, fetch sizes, a logger...).
	// They are applied after the source's defaults (read_committed, start at
	// the earliest offset, an OffsetOutOfRange is an error rather than a
	// silent reset) and may change those, and before the options the source
	// depends on (the group, the topics, the balancer, no autocommit, the
	// rebalance callbacks, the fetch-offset hook, BlockRebalanceOnPoll),
	// which they cannot change. Do not set kgo.InstanceID: a static member
	// does not leave the group when it closes, and its partitions wait for
	// the session timeout.
	Options []kgo.Opt
}

// LostHandler is sink.LostHandler: a Handler that has it is told of lost
// partitions (this member was thrown out of the group: another member may
// own them already) through Lost; without it, they go to Revoked.
type LostHandler = sink.LostHandler

// ErrClosed is returned by a closed Source.
var ErrClosed = errors.New("kafkasource: source closed")

// PartitionError is a fetch error of one partition (for example an
// OffsetOutOfRange: the position is no longer, or not yet, in the log).
type PartitionError struct {
	Partition string
	Err       error
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("kafkasource: partition %s: %v", e.Partition, e.Err)
}

func (e *PartitionError) Unwrap() error { return e.Err }

// Stats is what a Source has done so far.
type Stats struct {
	// Partitions are the partitions the handler owns now, sorted.
	Partitions []string
	// Assigned, Revoked and Lost count the handler's calls (Lost counts the
	// calls for lost partitions, whether they went to Lost or Revoked).
	Assigned, Revoked, Lost int
	// Dropped counts records Poll did not return: of a partition the
	// handler does not own, or below its position.
	Dropped int
	// GroupErrors counts the group sessions that ended in an error (this
	// member was thrown out, or could not join); LastGroupError is the last.
	GroupErrors    int
	LastGroupError error
	// MemberID and Generation are this member's in the group ("" and -1
	// when not in it).
	MemberID   string
	Generation int32
}

// part is what the source knows of a partition the handler owns.
type part struct {
	topic     string
	partition int32
	// start is the position the handler returned, -1 if none.
	start int64
	// next is the lowest offset Poll may return: the handler's position,
	// then the last returned record's offset + 1; -1 if not known yet.
	next int64
	// failed: Assigned failed; nothing of the partition is read.
	failed bool
	// retry: a kept partition whose take failed: Poll has the handler take
	// it again.
	retry bool
	// member is the group member ID the partition was assigned under.
	member string
}

// Source is a sink.Source over a Kafka consumer group.
type Source struct {
	cfg  Config
	opts []kgo.Opt

	// gate is held by the sink's goroutine whenever it is outside Poll
	// (from Start on); a rebalance callback holds it while it calls the
	// handler.
	gate sync.Mutex

	mu sync.Mutex
	cl *kgo.Client
	// ctx is for handler calls made from Poll; it ends at Close.
	ctx     context.Context
	cancel  context.CancelFunc
	h       sink.Handler
	started bool
	closed  bool
	polling bool
	// handling: a handler call is in progress (within Poll); the
	// handler may call Committed.
	handling bool
	owned    map[string]*part
	// pending is an error for the next Poll to return.
	pending error
	stats   Stats
	// limit is LimitPoll's: 0 none.
	limit int
}

var _ sink.Source = (*Source)(nil)

// New checks cfg and returns a Source; nothing is contacted before Start.
func New(cfg Config) (*Source, error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, errors.New("kafkasource: no brokers")
	case cfg.Group == "":
		return nil, errors.New("kafkasource: no group")
	case len(cfg.Topics) == 0:
		return nil, errors.New("kafkasource: no topics")
	case cfg.Start != StartCommitted && cfg.Start != StartEarliest:
		return nil, fmt.Errorf("kafkasource: unknown Start %d", cfg.Start)
	case cfg.MaxPollRecords < 0:
		return nil, errors.New("kafkasource: negative MaxPollRecords")
	}
	for _, t := range cfg.Topics {
		if t == "" || strings.Contains(t, "/") {
			return nil, fmt.Errorf("kafkasource: bad topic name %q", t)
		}
	}
	s := &Source{cfg: cfg, owned: make(map[string]*part)}
	s.opts = []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeStartOffset(kgo.NewOffset().AtStart()),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	}
	if cfg.ClientID != "" {
		s.opts = append(s.opts, kgo.ClientID(cfg.ClientID))
	}
	if cfg.SessionTimeout > 0 {
		s.opts = append(s.opts, kgo.SessionTimeout(cfg.SessionTimeout))
	}
	if cfg.RebalanceTimeout > 0 {
		s.opts = append(s.opts, kgo.RebalanceTimeout(cfg.RebalanceTimeout))
	}
	if cfg.HeartbeatInterval > 0 {
		s.opts = append(s.opts, kgo.HeartbeatInterval(cfg.HeartbeatInterval))
	}
	s.opts = append(s.opts, cfg.Options...)
	s.opts = append(s.opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.onAssigned),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
		kgo.AdjustFetchOffsetsFn(s.adjust),
	)
	return s, nil
}

// Start joins the group. h is told of partitions from within Poll. ctx
// bounds the first contact with the brokers.
func (s *Source) Start(ctx context.Context, h sink.Handler) error {
	if h == nil {
		return errors.New("kafkasource: nil handler")
	}
	s.mu.Lock()
	if s.started || s.closed {
		s.mu.Unlock()
		return errors.New("kafkasource: Start called twice, or after Close")
	}
	// The sink's goroutine is outside Poll from here on: it holds the gate.
	s.gate.Lock()
	cl, err := kgo.NewClient(s.opts...)
	if err != nil {
		s.gate.Unlock()
		s.mu.Unlock()
		return fmt.Errorf("kafkasource: %w", err)
	}
	s.cl, s.h, s.started = cl, h, true
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.Unlock()
	if err := cl.Ping(ctx); err != nil {
		s.Close()
		return fmt.Errorf("kafkasource: no broker answers: %w", err)
	}
	return nil
}

// Poll returns the next records of the partitions the handler owns, in
// order per partition, waiting at most until ctx ends; the handler is told
// of rebalances from within it. A rebalance callback in progress when ctx
// ends is waited for.
//
// Errors: ctx's (no records came), ErrClosed, a *PartitionError (fetching a
// partition failed; the source stays usable), or the error a handler call
// returned (wrapped). An error that comes with records is returned by the
// next Poll, alone.
func (s *Source) Poll(ctx context.Context) ([]sink.Record, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, ErrClosed
	case !s.started:
		s.mu.Unlock()
		return nil, errors.New("kafkasource: Poll before Start")
	case s.polling:
		s.mu.Unlock()
		return nil, errors.New("kafkasource: concurrent Poll")
	}
	if err := s.pending; err != nil {
		s.pending = nil
		s.mu.Unlock()
		return nil, err
	}
	s.polling = true
	cl := s.cl
	maxRecords := s.cfg.MaxPollRecords
	if s.limit > 0 && (maxRecords == 0 || s.limit < maxRecords) {
		maxRecords = s.limit
	}
	member, _ := cl.GroupMetadata()
	var retry []string
	for name, st := range s.owned {
		if st.retry && st.member == member {
			retry = append(retry, name)
		}
	}
	s.mu.Unlock()

	if len(retry) > 0 {
		// Partitions kgo reads whose take failed in a callback: the
		// handler takes them now, from within Poll.
		if err := s.take(s.ctx, cl, nil, retry); err != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.polling = false
			s.pending = nil
			if s.closed {
				s.gate.Unlock()
				return nil, ErrClosed
			}
			return nil, err
		}
	}

	// Let the handler run, then let kgo's held rebalance steps run.
	s.gate.Unlock()
	cl.AllowRebalance()
	fetches := cl.PollRecords(ctx, maxRecords)
	// From here until the next Poll, no handler call starts, and (with the
	// records just taken) kgo holds rebalances back.
	s.gate.Lock()

	s.mu.Lock()
	defer s.mu.Unlock()
	s.polling = false
	if s.closed {
		// Close ran meanwhile and left the gate to us.
		s.gate.Unlock()
		return nil, ErrClosed
	}

	var recs []sink.Record
	var ferr error
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Err != nil {
			ferr = errors.Join(ferr, s.fetchError(ctx, p.Topic, p.Partition, p.Err))
		}
		if len(p.Records) == 0 {
			return
		}
		name := partName(p.Topic, p.Partition)
		st := s.owned[name]
		if st == nil || st.failed {
			s.stats.Dropped += len(p.Records)
			return
		}
		for _, r := range p.Records {
			if st.next >= 0 && r.Offset < st.next {
				s.stats.Dropped++
				continue
			}
			st.next = r.Offset + 1
			recs = append(recs, sink.Record{
				Partition: name,
				Next:      strconv.FormatInt(r.Offset+1, 10),
				Key:       r.Key,
				Value:     r.Value,
				Time:      r.Timestamp,
			})
		}
	})
	if len(recs) > 0 {
		// An error (of a fetch, or of a handler call during this poll)
		// waits for the next Poll.
		s.pending = errors.Join(s.pending, ferr)
		return recs, nil
	}
	if err := errors.Join(s.pending, ferr); err != nil {
		s.pending = nil
		return nil, err
	}
	return nil, ctx.Err()
}

// LimitPoll bounds the records of the following Polls to n (n <= 0: only
// Config.MaxPollRecords bounds them), below Config.MaxPollRecords: the
// records kgo has buffered beyond it stay buffered for the next Poll. The
// sink's Runner sets it before every Poll to the room left in its open
// checkpoint (sink.BoundPolls). Called from the sink's goroutine, like
// Poll.
func (s *Source) LimitPoll(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = max(n, 0)
}

var _ sink.PollLimiter = (*Source)(nil)

// fetchError sorts an error kgo put into the fetches; it returns what Poll
// should report, or nil. Called with s.mu held.
func (s *Source) fetchError(ctx context.Context, topic string, partition int32, err error) error {
	var gs *kgo.ErrGroupSession
	switch {
	case errors.Is(err, kgo.ErrClientClosed):
		return ErrClosed
	case topic == "" && partition == -1 && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil // the poll's deadline: reported if no records came
	case errors.As(err, &gs):
		// The group session ended in an error; the handler has been told
		// of the partitions (onLost), and kgo rejoins.
		s.stats.GroupErrors++
		s.stats.LastGroupError = gs.Err
		s.logf("kafkasource: group %s: session ended: %v; rejoining", s.cfg.Group, gs.Err)
		return nil
	}
	return &PartitionError{Partition: partName(topic, partition), Err: err}
}

// Seek makes the following Polls return the records of each partition in
// positions from that position on (an empty position: from where a
// partition the handler returned no position for starts, per
// Config.Start), forgetting whatever was read or buffered past it: the sink
// aborted a checkpoint and reads its records again. A partition the handler
// does not own (any more) is skipped: it is read from the position Assigned
// returns when it comes back. Called from the sink's goroutine between
// Polls, like Committed: kgo holds rebalances back then, as SetOffsets
// requires.
func (s *Source) Seek(ctx context.Context, positions map[string]string) error {
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	starts := make(map[string]int64, len(positions))
	var names []string
	for name, pos := range positions {
		st := s.owned[name]
		if st == nil || st.failed {
			continue
		}
		starts[name] = -1
		if pos != "" {
			off, err := parsePosition(pos)
			if err != nil {
				s.mu.Unlock()
				return fmt.Errorf("kafkasource: Seek: partition %s: %w", name, err)
			}
			starts[name] = off
		}
		names = append(names, name)
	}
	cl := s.cl
	s.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	set, err := s.keptOffsets(ctx, cl, names, starts)
	if err != nil {
		return fmt.Errorf("kafkasource: Seek: %w", err)
	}
	s.mu.Lock()
	for _, name := range names {
		if st := s.owned[name]; st != nil {
			st.next = starts[name]
		}
	}
	s.mu.Unlock()
	// SetOffsets drops what kgo buffered of these partitions and fetches
	// from the new offsets.
	cl.SetOffsets(set)
	return nil
}

// Committed commits the group's offsets to positions, so that Kafka's lag
// tools see the sink's progress. Partitions the handler does not own are
// skipped (another member may own them: their offsets are its to commit).
// The group's offsets are a copy: the source never reads from them a
// partition the handler returned a position for. The error says that the
// commit failed (for example because this member was thrown out of the
// group); the sink's progress is not affected.
func (s *Source) Committed(ctx context.Context, positions map[string]string) error {
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	offsets := make(map[string]map[int32]kgo.EpochOffset)
	for name, pos := range positions {
		st := s.owned[name]
		if st == nil || st.failed {
			continue
		}
		off, err := parsePosition(pos)
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("kafkasource: Committed: partition %s: %w", name, err)
		}
		if offsets[st.topic] == nil {
			offsets[st.topic] = make(map[int32]kgo.EpochOffset)
		}
		offsets[st.topic][st.partition] = kgo.EpochOffset{Epoch: -1, Offset: off}
	}
	cl := s.cl
	s.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	var cerr error
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = fmt.Errorf("partition %s: %w", partName(t.Topic, p.Partition), err)
				}
			}
		}
	})
	if cerr != nil {
		return fmt.Errorf("kafkasource: committing the group's offsets: %w", cerr)
	}
	return nil
}

// Close leaves the group (at once: the partitions go to the other members
// without waiting for the session timeout) and closes the client. The
// handler is not called from Close: the sink finishes or aborts its
// checkpoint before it closes the source. Close may be called from another
// goroutine to end a Poll.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	cl := s.cl
	// Outside Poll the sink's goroutine holds the gate: release it so that
	// the callbacks kgo runs while leaving see closed and return.
	release := s.started && !s.polling
	s.mu.Unlock()
	if cl == nil {
		return nil
	}
	s.cancel()
	if release {
		s.gate.Unlock()
	}
	cl.AllowRebalance()
	cl.Close()
	return nil
}

// Stats returns what the source has done so far.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Partitions = make([]string, 0, len(s.owned))
	for name, p := range s.owned {
		if !p.failed {
			st.Partitions = append(st.Partitions, name)
		}
	}
	sort.Strings(st.Partitions)
	st.MemberID, st.Generation = "", -1
	if s.cl != nil {
		st.MemberID, st.Generation = s.cl.GroupMetadata()
	}
	return st
}

// usable is called with s.mu held.
func (s *Source) usable() error {
	switch {
	case s.closed:
		return ErrClosed
	case !s.started:
		return errors.New("kafkasource: not started")
	case s.polling && !s.handling:
		return errors.New("kafkasource: called during Poll")
	}
	return nil
}

// enter takes the gate for a callback; it reports false (gate not held) if
// the source is closed.
func (s *Source) enter() bool {
	s.gate.Lock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		s.gate.Unlock()
		return false
	}
	return true
}

// onAssigned is kgo's OnPartitionsAssigned, called after every sync of the
// group (with nothing added too): kgo calls it before it fetches the added
// partitions' committed offsets, and calls adjust after.
//
// A member thrown out of the group during a rebalance rejoins under a new
// member ID, and kgo compares the new assignment with the one it held under
// the old ID: a partition in both is neither revoked nor assigned, and kgo
// reads on from where it was. Another member may have owned and read it in
// between. Such a partition is told lost, then assigned again with the
// added ones, and kgo is moved to the handler's position with SetOffsets.
func (s *Source) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	member, _ := cl.GroupMetadata()
	added := partNames(assigned)
	s.mu.Lock()
	var stale []string
	for name, st := range s.owned {
		if st.member != member && !slices.Contains(added, name) {
			stale = append(stale, name)
		}
	}
	s.mu.Unlock()
	if len(added) == 0 && len(stale) == 0 {
		return
	}
	if !s.enter() {
		return
	}
	defer s.gate.Unlock()
	if len(stale) > 0 {
		sort.Strings(stale)
		s.logf("kafkasource: group %s: %v were assigned under an expired membership (member ID now %s)", s.cfg.Group, stale, member)
		s.let(stale, "lost", s.tellLost(ctx, stale))
	}
	err := s.take(ctx, cl, added, stale)
	if err != nil && len(added) > 0 {
		// adjust fails the group session: kgo reads none of the added
		// partitions, tells us they are lost, and rejoins.
		s.logf("kafkasource: group %s: %v", s.cfg.Group, err)
	}
}

// take has the handler take partitions: added ones (kgo fetches their
// committed offsets next; adjust puts the handler's positions in their
// place), and kept ones (kgo reads them already: they are moved to the
// handler's positions, or the group's committed offset or the start of the
// log, with SetOffsets). Kept partitions whose take fails are taken again
// at the next Poll; a failed Assigned is also returned by a Poll. Called
// with the gate held, from a callback or from Poll.
func (s *Source) take(ctx context.Context, cl *kgo.Client, added, kept []string) error {
	names := append(slices.Clone(added), kept...)
	sort.Strings(names)
	s.setHandling(true)
	positions, err := s.h.Assigned(ctx, names)
	s.setHandling(false)
	starts := make(map[string]int64, len(names))
	if err == nil {
		for _, name := range names {
			starts[name] = -1
			if pos, ok := positions[name]; ok {
				off, perr := parsePosition(pos)
				if perr != nil {
					err = fmt.Errorf("position of %s: %w", name, perr)
					break
				}
				starts[name] = off
			}
		}
	}
	var set map[string]map[int32]kgo.EpochOffset
	if err == nil && len(kept) > 0 {
		set, err = s.keptOffsets(ctx, cl, kept, starts)
	}
	member, _ := cl.GroupMetadata()
	s.mu.Lock()
	s.stats.Assigned++
	for _, name := range names {
		topic, partition, _ := splitName(name)
		st := &part{topic: topic, partition: partition, start: -1, next: -1, member: member}
		if err != nil {
			st.failed = true
			st.retry = slices.Contains(kept, name)
		} else {
			st.start, st.next = starts[name], starts[name]
		}
		s.owned[name] = st
	}
	if err != nil {
		err = fmt.Errorf("kafkasource: Assigned(%s): %w", strings.Join(names, " "), err)
		s.pending = errors.Join(s.pending, err)
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	if len(set) > 0 {
		// kgo drops what it buffered of these partitions and fetches from
		// the new offsets; Poll drops any record below them.
		cl.SetOffsets(set)
	}
	s.logf("kafkasource: group %s: assigned %v at %v", s.cfg.Group, names, positions)
	return nil
}

// keptOffsets returns where kept partitions are read from: the handler's
// position, else (Config.Start) the group's committed offset or the start
// of the log. It fills starts in for those it looks up.
func (s *Source) keptOffsets(ctx context.Context, cl *kgo.Client, kept []string, starts map[string]int64) (map[string]map[int32]kgo.EpochOffset, error) {
	var lookup []string
	for _, name := range kept {
		if starts[name] < 0 {
			lookup = append(lookup, name)
		}
	}
	if len(lookup) > 0 {
		adm := kadm.NewClient(cl)
		var committed kadm.OffsetResponses
		if s.cfg.Start == StartCommitted {
			var err error
			committed, err = adm.FetchOffsetsForTopics(ctx, s.cfg.Group, s.cfg.Topics...)
			if err == nil {
				err = committed.Error()
			}
			if err != nil {
				return nil, fmt.Errorf("the group's offsets: %w", err)
			}
		}
		logStarts, err := adm.ListStartOffsets(ctx, s.cfg.Topics...)
		if err == nil {
			err = logStarts.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("the partitions' start offsets: %w", err)
		}
		for _, name := range lookup {
			topic, partition, _ := splitName(name)
			if o, ok := committed.Lookup(topic, partition); ok && o.At >= 0 {
				starts[name] = o.At
			} else if o, ok := logStarts.Lookup(topic, partition); ok && o.Offset >= 0 {
				starts[name] = o.Offset
			} else {
				return nil, fmt.Errorf("no start offset for %s", name)
			}
		}
	}
	set := make(map[string]map[int32]kgo.EpochOffset)
	for _, name := range kept {
		topic, partition, _ := splitName(name)
		if set[topic] == nil {
			set[topic] = make(map[int32]kgo.EpochOffset)
		}
		set[topic][partition] = kgo.EpochOffset{Epoch: -1, Offset: starts[name]}
	}
	return set, nil
}

// errAssignFailed fails the group session after a failed Assigned. It does
// not wrap the handler's error: kgo leaves the group for good on an error
// that is context.Canceled.
var errAssignFailed = errors.New("kafkasource: the handler did not take the assigned partitions")

// adjust is kgo's AdjustFetchOffsetsFn: it replaces the group's committed
// offsets, just fetched, with the handler's positions before kgo fetches
// any record of the partitions.
func (s *Source) adjust(_ context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for topic, ps := range offsets {
		for partition := range ps {
			st := s.owned[partName(topic, partition)]
			switch {
			case st == nil:
				// The handler was not asked (the source is closing):
				// Poll drops the partition's records.
			case st.failed:
				return nil, errAssignFailed
			case st.start >= 0:
				ps[partition] = kgo.NewOffset().At(st.start).WithEpoch(-1)
			case s.cfg.Start == StartEarliest:
				ps[partition] = kgo.NewOffset().AtStart()
			}
		}
	}
	return offsets, nil
}

// onRevoked is kgo's OnPartitionsRevoked. kgo has stopped fetching the
// partitions and dropped what it buffered of them; it gives them away once
// this returns.
//
// A member thrown out of the group during a rebalance (it did not rejoin
// within the rebalance timeout) finds out when it rejoins: the group no
// longer knows its member ID, kgo joins under a new one, and revokes what
// the new assignment lacks through this callback, not OnPartitionsLost.
// Those partitions may have been owned and read by another member since:
// they are lost, and are reported as such. A partition assigned under the
// member ID still current was held all along and is merely revoked.
func (s *Source) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	s.takeAway(ctx, cl, revoked, false)
}

// onLost is kgo's OnPartitionsLost: this member is out of the group (thrown
// out, or it could not join) and the partitions may have an owner already.
func (s *Source) onLost(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	s.takeAway(ctx, cl, lost, true)
}

func (s *Source) takeAway(ctx context.Context, cl *kgo.Client, m map[string][]int32, lost bool) {
	names := partNames(m)
	if len(names) == 0 {
		return
	}
	if !s.enter() {
		return
	}
	defer s.gate.Unlock()
	member, _ := cl.GroupMetadata()
	var gone, revoked []string
	s.mu.Lock()
	for _, name := range names {
		if st := s.owned[name]; lost || st != nil && st.member != member {
			gone = append(gone, name)
		} else {
			revoked = append(revoked, name)
		}
	}
	s.mu.Unlock()
	if len(gone) > 0 {
		s.let(gone, "lost", s.tellLost(ctx, gone))
	}
	if len(revoked) > 0 {
		s.setHandling(true)
		err := s.h.Revoked(ctx, revoked)
		s.setHandling(false)
		s.let(revoked, "revoked", err)
	}
}

// setHandling marks a handler call in progress (inside Poll): the handler
// may call Committed then, to acknowledge what it finished before letting
// partitions go.
func (s *Source) setHandling(on bool) {
	s.mu.Lock()
	s.handling = on
	s.mu.Unlock()
}

// tellLost tells the handler partitions are lost: Lost if it has it, else
// Revoked.
func (s *Source) tellLost(ctx context.Context, names []string) error {
	s.setHandling(true)
	defer s.setHandling(false)
	if lh, ok := s.h.(LostHandler); ok {
		return lh.Lost(ctx, names)
	}
	return s.h.Revoked(ctx, names)
}

// let forgets partitions the handler was told it no longer owns.
func (s *Source) let(names []string, what string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range names {
		delete(s.owned, name)
	}
	if what == "lost" {
		s.stats.Lost++
	} else {
		s.stats.Revoked++
	}
	s.logf("kafkasource: group %s: %s %v", s.cfg.Group, what, names)
	if err != nil {
		s.pending = errors.Join(s.pending, fmt.Errorf("kafkasource: %s(%s): %w", what, strings.Join(names, " "), err))
	}
}

func (s *Source) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

func partName(topic string, partition int32) string {
	return topic + "/" + strconv.FormatInt(int64(partition), 10)
}

// partNames returns the sorted names of m's partitions.
func partNames(m map[string][]int32) []string {
	var names []string
	for topic, ps := range m {
		for _, p := range ps {
			names = append(names, partName(topic, p))
		}
	}
	sort.Strings(names)
	return names
}

// splitName parses "<topic>/<partition>".
func splitName(name string) (string, int32, error) {
	i := strings.LastIndexByte(name, '/')
	if i <= 0 {
		return "", 0, fmt.Errorf("kafkasource: bad partition name %q", name)
	}
	p, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || p < 0 {
		return "", 0, fmt.Errorf("kafkasource: bad partition name %q", name)
	}
	return name[:i], int32(p), nil
}

func parsePosition(pos string) (int64, error) {
	off, err := strconv.ParseInt(pos, 10, 64)
	if err != nil || off < 0 {
		return 0, fmt.Errorf("bad position %q (want a decimal offset)", pos)
	}
	return off, nil
}
