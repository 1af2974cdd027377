package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/xadb/xa/sink"
)

// OnError says what the sink does with a bad record.
type OnError string

const (
	// OnErrorStop (the default): a bad record aborts its checkpoint, which
	// is read again; Run stops after MaxAborts aborts in a row, having
	// written nothing of the checkpoint.
	OnErrorStop OnError = "stop"
	// OnErrorDeadLetter: a record that cannot be mapped (not JSON, a
	// required path missing, a value its column cannot hold: a
	// *MappingError), or whose row its database refuses (a
	// *RefusedError), is written to the dead-letter table
	// (xa_sink_dead_letters, in the progress target) in the same
	// checkpoint, exactly once like any row, and the others land; a
	// record lands whole or not at all (docs/sink.md, "Rows the
	// database refuses").
	OnErrorDeadLetter OnError = "dead_letter"
)

// DefaultMaxDeadLetters is Config.MaxDeadLetters' default.
const DefaultMaxDeadLetters = 100

// DeadLetterTable is the dead-letter table, in the progress target.
const DeadLetterTable = "xa_sink_dead_letters"

// deadTableID is the dead-letter table's id among the sink's tables; no
// configured table can have it (ids are "target/name" or names).
const deadTableID = "\x00dead-letters"

// deadColumns are the dead-letter table's columns, in the order of its
// rows: the sink, the instance and checkpoint that wrote it and its
// number within the checkpoint (the primary key), the record's
// partition and position (the position after it, as the progress table
// keeps positions), its key and value as they came, the error, and when.
var deadColumns = []Column{{Name: "sink"}, {Name: "incarnation"}, {Name: "checkpoint"}, {Name: "seq"},
	{Name: "partition"}, {Name: "position"}, {Name: "record_key"}, {Name: "record_value"}, {Name: "error"}, {Name: "created"}}

// ErrTooManyDeadLetters: a checkpoint holds more bad records than
// Config.MaxDeadLetters: the failure is systematic (a table dropped, a
// column renamed, every event of a new shape), and the checkpoint aborts
// rather than dead-letter the stream.
var ErrTooManyDeadLetters = errors.New("sink: too many bad records in one checkpoint")

// deadLetter adds the record r, refused with err, to c's dead letters. It
// returns the error that aborts the checkpoint when the sink stops on bad
// records, or when c holds more than MaxDeadLetters.
func (in *instance) deadLetter(c *checkpoint, r *sink.Record, err *MappingError) error {
	if in.s.cfg.OnError != OnErrorDeadLetter {
		return err
	}
	return in.addDead(c, r.Partition, r.Next, r.Key, r.Value, err)
}

// addDead adds a record, set aside for err (a *MappingError or a
// *RefusedError naming it), to c's dead letters; it returns
// ErrTooManyDeadLetters when c holds MaxDeadLetters already. The dead
// letter's error column holds the reason: a mapping's error, or the whole
// refusal (record, table, column and the server's message).
func (in *instance) addDead(c *checkpoint, partition, position string, key, value []byte, err error) error {
	if c.dead+c.setAside >= in.s.cfg.MaxDeadLetters {
		return fmt.Errorf("%w: more than %d (MaxDeadLetters, on_error: dead_letter) in checkpoint %d; the last: %w",
			ErrTooManyDeadLetters, in.s.cfg.MaxDeadLetters, c.h.Checkpoint, err)
	}
	c.dead++
	tb := in.s.tables[deadTableID]
	buf := c.bufs[deadTableID]
	if buf == nil {
		buf = &buffer{}
		c.bufs[deadTableID] = buf
	}
	reason := err
	var me *MappingError
	if errors.As(err, &me) {
		reason = me.Err
	}
	buf.add(tb, []any{in.s.cfg.Name, int64(c.h.Incarnation), int64(c.h.Checkpoint), int64(c.dead), partition, position,
		bytesOrNil(key), bytesOrNil(value), deadError(reason.Error()), time.Now().UTC()}, false, nil)
	in.log.Warn("sink: a bad record goes to the dead-letter table", "partition", partition, "position", position, "err", reason)
	return nil
}

// maxDeadError bounds a dead letter's error text, in bytes: MariaDB's
// TEXT column holds 65535, and an error may quote the record's value
// whole (a *ValueError, PostgreSQL's "invalid input syntax ... "). A
// longer text would have the dead letter's own row refused, which aborts
// every reading of its checkpoint (TestDeadLetterLongError); the value is
// in record_value anyway.
const maxDeadError = 16 << 10

// deadError returns msg as the error column holds it: valid UTF-8, at
// most maxDeadError bytes; a longer one keeps its head and its tail (the
// reason often follows the quoted value) around a note of the cut.
func deadError(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) <= maxDeadError {
		return msg
	}
	head, tail := maxDeadError/2, len(msg)-maxDeadError/4
	for head > 0 && !utf8.RuneStart(msg[head]) {
		head--
	}
	for tail < len(msg) && !utf8.RuneStart(msg[tail]) {
		tail++
	}
	return fmt.Sprintf("%s ... (%d bytes cut) ... %s", msg[:head], tail-head, msg[tail:])
}

func bytesOrNil(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// DeadLetter is one row of the dead-letter table.
type DeadLetter struct {
	Incarnation uint64    `json:"incarnation"`
	Checkpoint  uint64    `json:"checkpoint"`
	Seq         int64     `json:"seq"`
	Partition   string    `json:"partition"`
	Position    string    `json:"position"`
	Key         []byte    `json:"key"`
	Value       []byte    `json:"value"`
	Error       string    `json:"error"`
	Created     time.Time `json:"created"`
}

// ReadDeadLetters returns the dead letters of sink name in its progress
// target t, oldest first, at most limit (0: all).
func ReadDeadLetters(ctx context.Context, t TargetConfig, name string, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := withStore(ctx, t, func(st store) error {
		var err error
		out, err = st.deadLetters(ctx, name, limit)
		return err
	})
	return out, err
}
