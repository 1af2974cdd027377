package filelog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fileSystem is the narrow set of mutating file operations the log uses
// after Open has read the segments. It exists so that tests can inject
// faults and simulate crashes between any two operations; production code
// uses osFS.
type fileSystem interface {
	// OpenFile opens name like os.OpenFile.
	OpenFile(name string, flag int, perm os.FileMode) (file, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// SyncDir makes the directory's entries (created, renamed, removed
	// files) durable.
	SyncDir(dir string) error
}

// file is an open segment.
type file interface {
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes the written data durable (fdatasync).
	Sync() error
	// Truncate cuts the file to size (Sync makes that durable).
	Truncate(size int64) error
	Close() error
}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error             { return os.Remove(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type osFile struct{ f *os.File }

func (o osFile) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }
func (o osFile) Close() error                             { return o.f.Close() }

func (o osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(o.f.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: o.f.Name(), Err: err}
		}
		return nil
	}
}

func (o osFile) Truncate(size int64) error { return o.f.Truncate(size) }

// lockName is the file that Open locks (flock, exclusive) for as long as
// the log is open. It holds the owner's process id, for error messages.
const lockName = "LOCK"

// lockDir takes the exclusive lock of dir. The error wraps ErrLocked when
// another Log (in this or another process) holds it.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("filelog: opening lock file: %w", err)
	}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s%s", ErrLocked, dir, lockHolder(path))
		}
		return nil, fmt.Errorf("filelog: locking %s: %w", path, err)
	}
	return f, nil
}

// recordHolder writes this process's id into the lock file, for the error
// messages of later openers. Best effort.
func recordHolder(f *os.File) {
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
}

// lockShared tries to take a shared lock of dir without creating or
// modifying anything. It returns a nil file and inUse=false when there is no
// lock file, and inUse=true when another process holds the exclusive lock.
func lockShared(dir string) (f *os.File, inUse bool, err error) {
	path := filepath.Join(dir, lockName)
	f, err = os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("filelog: opening lock file: %w", err)
	}
	if err := flock(f, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("filelog: locking %s: %w", path, err)
	}
	return f, false, nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

func lockHolder(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	pid := strings.TrimSpace(string(b))
	if pid == "" {
		return ""
	}
	// The file names the last process that opened the log; a Verify or
	// Dump holding a shared lock does not write it.
	return " (last opened by process " + pid + ")"
}
