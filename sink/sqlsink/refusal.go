package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// RefusedError is a record's row that its database refused for its data:
// a value too long for its column, out of range or of the wrong type, a
// NOT NULL, CHECK, foreign-key or (append tables) unique constraint
// violated. The sink narrows a refused batch to its refused rows (see
// putRows) so that the error names the record; with OnErrorStop it aborts
// the checkpoint, with OnErrorDeadLetter the record is a dead letter. It
// unwraps to the driver's error (*mysql.MySQLError, *pgconn.PgError, or an
// *EncodeError).
type RefusedError struct {
	Table  string
	Target string
	// Partition and Position name the record (Position is its Next, as
	// a MappingError's).
	Partition string
	Position  string
	// Column is the refused column, Constraint the violated constraint,
	// as far as the server says ("" when it does not).
	Column     string
	Constraint string
	Err        error
}

// Error names the record, the table, the column and the server's reason.
func (e *RefusedError) Error() string {
	what := ""
	if e.Column != "" {
		what += ", column " + e.Column
	}
	if e.Constraint != "" {
		what += ", constraint " + e.Constraint
	}
	if e.Partition == "" && e.Position == "" {
		// A row of no record read from the source (a replay's).
		return fmt.Sprintf("sink: %s on %s refused a row%s: %v", e.Table, e.Target, what, e.Err)
	}
	return fmt.Sprintf("sink: %s on %s refused the row of the record of %s before position %s%s: %v",
		e.Table, e.Target, e.Partition, e.Position, what, e.Err)
}

// Unwrap returns the database's (or the client's) error.
func (e *RefusedError) Unwrap() error { return e.Err }

// refusal is what a dialect reads from a data error: the column and the
// constraint it names, if any.
type refusal struct{ column, constraint string }

// batchRefused is a writer's error when its database refused one
// statement for its data: rows[done:done+n] of the write were refused at
// once (the statement's rows), rows[:done] stay written once the writer's
// undo ran, the rest was not sent.
type batchRefused struct {
	done, n int
	refusal
	err error
}

func (e *batchRefused) Error() string { return e.err.Error() }
func (e *batchRefused) Unwrap() error { return e.err }

// origin is the record a buffered row comes from: what a refusal of the
// row names, and what its dead letter holds.
type origin struct {
	partition, position string
	key, value          []byte
	// rows is the number of rows the record maps to (in all tables).
	rows int
}

// rowFrom is a buffered row's origin; merged says that the row replaced
// a buffered row of another record (an upsert table's key seen again).
type rowFrom struct {
	o      *origin
	merged bool
}

// refusedRow is a row its database refused, found by putRows.
type refusedRow struct {
	tb   *table
	from rowFrom
	why  *batchRefused
}

// rowGuard lets a refused write be undone so that the branch goes on:
// guard is called before each write of putRows, undo after a refusal. On
// MySQL/MariaDB a refused statement undoes itself and the branch goes on
// (docs/xa-facts.md, fact 21): both do nothing.
// On PostgreSQL a failed statement fails the transaction: guard sets a
// savepoint, undo rolls back to it.
type rowGuard interface {
	guard(ctx context.Context) error
	undo(ctx context.Context) error
}

// putRows writes rows on w, narrowing a refused batch to its refused rows:
// the refused statement's rows are halved and each half written again,
// down to single rows, which are the refused ones. It returns once it has
// found limit refused rows (the rest is then not all written: the caller
// aborts). The rows not refused are written once each, in their order.
// Errors other than refusals end it.
//
// With del, rows are the keys of deletes by key (rowWriter.delete), which
// are narrowed alike: a delete can be refused too (a row still referenced
// by a foreign key).
func putRows(ctx context.Context, w rowWriter, tb *table, rows [][]any, limit int, del bool) ([]int, []*batchRefused, error) {
	var bad []int
	var why []*batchRefused
	var put func(lo, hi int) error
	put = func(lo, hi int) error {
		for lo < hi && len(bad) < limit {
			if err := w.guard(ctx); err != nil {
				return err
			}
			var err error
			if del {
				err = w.delete(ctx, tb, rows[lo:hi])
			} else {
				err = w.write(ctx, tb, rows[lo:hi])
			}
			if err == nil {
				return nil
			}
			var br *batchRefused
			if !errors.As(err, &br) {
				return err
			}
			if err := w.undo(ctx); err != nil {
				return fmt.Errorf("sink: undoing a refused write to %s on %s: %w (refused: %w)", tb.Name, tb.Target, err, br.err)
			}
			a, b := lo+br.done, lo+br.done+br.n
			if br.n <= 0 || br.done < 0 || b > hi {
				// A writer's bug: never loop on it.
				return fmt.Errorf("sink: writing %d rows to %s on %s: a refusal of rows %d..%d: %w", hi-lo, tb.Name, tb.Target, a, b, br.err)
			}
			if b-a == 1 {
				bad, why = append(bad, a), append(why, br)
			} else {
				mid := a + (b-a)/2
				if err := put(a, mid); err != nil {
					return err
				}
				if err := put(mid, b); err != nil {
					return err
				}
			}
			lo = b
		}
		return nil
	}
	err := put(0, len(rows))
	return bad, why, err
}

// ErrRefusedElsewhere is the reason of an abort when a refused row's
// record has other rows (in other tables, or merged with another record's
// row of an upsert table) that the checkpoint may have written already:
// the record is remembered as refused and the checkpoint read again, and
// this time the record goes to the dead letters without any of its rows
// (docs/sink.md, "Bad records").
var ErrRefusedElsewhere = errors.New("sink: a refused record has other rows in the checkpoint; reading it again without them")

// poisonKey is the key of a record in instance.poison.
func poisonKey(partition, position string) string { return partition + "\x00" + position }

// settleRefused decides what becomes of the rows refused by the last
// flushes (c.refused), once no flush runs: with OnErrorStop the first
// aborts the checkpoint; with OnErrorDeadLetter a record with a single
// row is a dead letter now; one with other rows is remembered (poison)
// and the checkpoint is doomed: PreCommit aborts it with
// ErrRefusedElsewhere, so that it is read again and the record lands
// whole or not at all.
func (in *instance) settleRefused(c *checkpoint) error {
	refused := c.refused
	c.refused = nil
	errs := make([]*RefusedError, len(refused))
	whole := false
	for i, r := range refused {
		re := &RefusedError{Table: r.tb.Name, Target: r.tb.Target, Column: r.why.column, Constraint: r.why.constraint, Err: r.why.err}
		if o := r.from.o; o != nil {
			re.Partition, re.Position = o.partition, o.position
		}
		if r.from.o == nil || in.s.cfg.OnError != OnErrorDeadLetter {
			return re
		}
		errs[i] = re
		whole = whole || r.from.o.rows > 1 || r.from.merged
	}
	if whole {
		// Some refused record may have rows written: every refused
		// record is remembered, and the checkpoint read again.
		in.mu.Lock()
		if in.poison == nil {
			in.poison = map[string]error{}
		}
		for i, r := range refused {
			k := poisonKey(r.from.o.partition, r.from.o.position)
			if in.poison[k] == nil {
				c.setAside++ // a record refused in two tables counts once
			}
			in.poison[k] = errs[i]
		}
		in.mu.Unlock()
		in.log.Warn("sink: a refused record has other rows in the checkpoint; the checkpoint is read again and the refused records set aside whole",
			"refused", len(refused), "first", errs[0])
		// The checkpoint aborts at PreCommit, not now: the records
		// still to come are written (and rolled back) so that every
		// refused record of the checkpoint is remembered by this one
		// reading. Aborting at the first poll with one cost an abort
		// per poll holding one, and MaxAborts of them in a
		// checkpoint stopped the run (TestRefusedSparse).
		if c.doomed == nil {
			c.doomed = fmt.Errorf("%w: %w", ErrRefusedElsewhere, errs[0])
		}
		// Read again, they are dead letters: a systematic refusal
		// stops here rather than narrow every batch to its end.
		if n := c.dead + c.setAside; n > in.s.cfg.MaxDeadLetters {
			return fmt.Errorf("%w: more than %d (MaxDeadLetters, on_error: dead_letter) in checkpoint %d; the last: %w",
				ErrTooManyDeadLetters, in.s.cfg.MaxDeadLetters, c.h.Checkpoint, errs[len(errs)-1])
		}
		return nil
	}
	for i, r := range refused {
		o := r.from.o
		if err := in.addDead(c, o.partition, o.position, o.key, o.value, errs[i]); err != nil {
			return err
		}
	}
	return nil
}

// poisoned returns the refusal remembered for a record. It is remembered
// until a checkpoint that sets the record aside is decided
// (forgetPoison): the checkpoint may abort again, for another record
// refused in it, and read again the record would then be refused again,
// aborting the next try in turn (found by TestSinkKillDeadLetters with a
// refused record in every twenty: "8 aborts in a row", each for the
// record set aside by the try before).
func (in *instance) poisoned(partition, position string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.poison) == 0 {
		return nil
	}
	return in.poison[poisonKey(partition, position)]
}

// forgetPoisonOf forgets the remembered refusals of the records of
// partitions, which this instance no longer holds (released or lost): the
// instance that takes a partition over finds its refused records again,
// and one that takes it back tries them again. The caller holds in.mu.
func (in *instance) forgetPoisonOf(partitions []string) {
	if len(in.poison) == 0 || len(partitions) == 0 {
		return
	}
	for k := range in.poison {
		part, _, _ := strings.Cut(k, "\x00")
		if slices.Contains(partitions, part) {
			delete(in.poison, k)
		}
	}
}

// forgetPoison forgets the remembered refusals of keys: their records'
// dead letters are in a decided checkpoint.
func (in *instance) forgetPoison(keys []string) {
	if len(keys) == 0 {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, k := range keys {
		delete(in.poison, k)
	}
}

// refusalLimit is the number of refused rows a flush looks for: one when
// the sink stops on bad records, else one more than the dead letters the
// checkpoint may still hold.
func (in *instance) refusalLimit(c *checkpoint) int {
	if in.s.cfg.OnError != OnErrorDeadLetter {
		return 1
	}
	return max(1, in.s.cfg.MaxDeadLetters-c.dead-c.setAside+1)
}

// quoted names in servers' messages: 'v', `v` or `db`.`t`.`v`.
var (
	reColumn     = regexp.MustCompile("(?i)column ((?:`[^`]*`\\.)*`([^`]*)`|'([^']*)'|\"([^\"]*)\"|([A-Za-z_][A-Za-z0-9_$]*))")
	reConstraint = regexp.MustCompile("(?i)constraint ((?:`[^`]*`\\.)*`([^`]*)`|'([^']*)'|\"([^\"]*)\")")
)

// nameIn returns the last name that re finds in a message ("" if none).
func nameIn(re *regexp.Regexp, msg string) string {
	m := re.FindStringSubmatch(msg)
	for i := len(m) - 1; i >= 2; i-- {
		if m[i] != "" {
			return m[i]
		}
	}
	return ""
}
