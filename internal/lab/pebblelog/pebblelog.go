// Package pebblelog is a commit log on Pebble (github.com/cockroachdb/pebble/v2),
// kept to be compared against recovery/filelog, the default, in benchmarks
// (internal/lab/logbench). It is lab code: no product package imports it.
// It does not implement the whole decision-log contract (xa.RecoveryLog:
// identity, abort records and the fence, delegations, heuristics) and must
// not be used as a transaction manager's log.
//
// Commit records are keys "c/<global id>" whose values are
// xa.CommitRecord.MarshalBinary. LogCommit writes with pebble.Sync: it
// returns once the record is in Pebble's write-ahead log and synced, and
// Pebble's commit pipeline lets concurrent writers share a sync. Forget is a
// delete written without sync.
//
// Caveat, demonstrated by this package's tests: Pebble's WAL replay takes a
// bad chunk in the last WAL for the end of the log unless a WAL-sync chunk
// in a later 32 KiB block proves otherwise. Such chunks are written only in
// WALs created after the format is at least FormatWALSyncChunks (never in
// the first WAL of a new database). A record damaged in the last block, or
// anywhere in a WAL without them, is taken for a torn tail, and every
// record after it is dropped silently on Open. recovery/filelog fails Open
// with ErrCorrupt instead.
package pebblelog

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/xadb/xa/xa"
)

// Options configure Open.
type Options struct {
	// NoSync writes without syncing. For tests only.
	NoSync bool
	// Logger receives Pebble's log messages. Nil discards them.
	Logger *slog.Logger
	// FormatMajorVersion is Pebble's on-disk format; zero means
	// pebble.FormatNewest.
	FormatMajorVersion pebble.FormatMajorVersion
}

// Log is a decision log in a Pebble database. Its methods are safe for
// concurrent use.
type Log struct {
	db    *pebble.DB
	write *pebble.WriteOptions
	syncs *atomic.Int64
}

// Log is not an xa.DecisionLog: it has no identity, no abort records and
// no fence, and serves only as a benchmark baseline for the commit path
// (LogCommit, Forget) that internal/lab/logbench drives.

const prefix = "c/"

// Open opens (creating if needed) the Pebble database in dir. Pebble locks
// the directory; a second Open fails.
func Open(dir string, opts Options) (*Log, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	syncs := new(atomic.Int64)
	po := &pebble.Options{
		FS:                 &countingFS{FS: vfs.Default, syncs: syncs},
		Logger:             slogAdapter{logger},
		FormatMajorVersion: cmp.Or(opts.FormatMajorVersion, pebble.FormatNewest),
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("pebblelog: %w", err)
	}
	w := pebble.Sync
	if opts.NoSync {
		w = pebble.NoSync
	}
	return &Log{db: db, write: w, syncs: syncs}, nil
}

func key(id xa.GlobalID) []byte { return []byte(prefix + id.String()) }

// LogCommit writes rec and returns once Pebble has synced it. Pebble takes
// no context: ctx is only checked on entry, and once the write has started
// it runs to the end. An error means the outcome is unknown.
func (l *Log) LogCommit(ctx context.Context, rec xa.CommitRecord) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebblelog: commit %v not logged: %w", rec.ID, err)
	}
	v, err := rec.MarshalBinary()
	if err != nil {
		return fmt.Errorf("pebblelog: commit %v: %w", rec.ID, err)
	}
	// The codec encodes some records it cannot decode; one would make
	// Commits fail for good.
	var check xa.CommitRecord
	if err := check.UnmarshalBinary(v); err != nil {
		return fmt.Errorf("pebblelog: commit %v cannot be logged, it would not decode: %w", rec.ID, err)
	}
	if err := l.db.Set(key(rec.ID), v, l.write); err != nil {
		return fmt.Errorf("pebblelog: commit %v: %w: %w", rec.ID, xa.ErrOutcomeUnknown, err)
	}
	return nil
}

// Forget deletes the record of id without waiting for a sync.
func (l *Log) Forget(ctx context.Context, id xa.GlobalID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.db.Delete(key(id), pebble.NoSync); err != nil {
		return fmt.Errorf("pebblelog: forget %v: %w", id, err)
	}
	return nil
}

// Lookup returns the commit record of id, if there is one.
func (l *Log) Lookup(ctx context.Context, id xa.GlobalID) (xa.CommitRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return xa.CommitRecord{}, false, err
	}
	v, closer, err := l.db.Get(key(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return xa.CommitRecord{}, false, nil
	}
	if err != nil {
		return xa.CommitRecord{}, false, fmt.Errorf("pebblelog: lookup %v: %w", id, err)
	}
	defer closer.Close()
	var rec xa.CommitRecord
	if err := rec.UnmarshalBinary(v); err != nil {
		return xa.CommitRecord{}, false, fmt.Errorf("pebblelog: lookup %v: %w", id, err)
	}
	return rec, true, nil
}

// Commits returns every commit record, oldest (by Logged, then ID) first.
func (l *Log) Commits(ctx context.Context) ([]xa.CommitRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	it, err := l.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: []byte(prefix),
		UpperBound: []byte("c0"), // '0' follows '/'
	})
	if err != nil {
		return nil, fmt.Errorf("pebblelog: %w", err)
	}
	var out []xa.CommitRecord
	for ok := it.First(); ok; ok = it.Next() {
		var rec xa.CommitRecord
		if err := rec.UnmarshalBinary(it.Value()); err != nil {
			it.Close()
			return nil, fmt.Errorf("pebblelog: record %q: %w", bytes.Clone(it.Key()), err)
		}
		out = append(out, rec)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebblelog: %w", err)
	}
	slices.SortFunc(out, func(a, b xa.CommitRecord) int {
		return cmp.Or(a.Logged.Compare(b.Logged), strings.Compare(a.ID.String(), b.ID.String()))
	})
	return out, nil
}

// SyncCount returns how many times Pebble has synced a WAL file since Open.
func (l *Log) SyncCount() int64 { return l.syncs.Load() }

// Close closes the database.
func (l *Log) Close() error {
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("pebblelog: %w", err)
	}
	return nil
}

// countingFS counts syncs of WAL files (*.log).
type countingFS struct {
	vfs.FS
	syncs *atomic.Int64
}

func (c *countingFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &countingFile{File: f, syncs: c.syncs}, nil
}

func (c *countingFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, cat)
	return c.wrap(name, f, err)
}

func (c *countingFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.ReuseForWrite(oldname, newname, cat)
	return c.wrap(newname, f, err)
}

func (c *countingFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.OpenReadWrite(name, cat, opts...)
	return c.wrap(name, f, err)
}

type countingFile struct {
	vfs.File
	syncs *atomic.Int64
}

func (f *countingFile) Sync() error {
	f.syncs.Add(1)
	return f.File.Sync()
}

func (f *countingFile) SyncData() error {
	f.syncs.Add(1)
	return f.File.SyncData()
}

// slogAdapter sends Pebble's log messages to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Infof(format string, args ...any) {
	a.l.Info(fmt.Sprintf(format, args...), "component", "pebble")
}

func (a slogAdapter) Errorf(format string, args ...any) {
	a.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (a slogAdapter) Fatalf(format string, args ...any) {
	a.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf("pebble: "+format, args...))
}
