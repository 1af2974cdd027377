package logbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xadb/xa/xa"
)

// DiskStore is the yardstick the logs are measured against: what the disk
// allows. Each of its "decisions" is one synchronous write, done the way
// the embedded log writes a group (a record-sized write over preallocated
// space, then fdatasync), one at a time whatever the writers: its rate is
// one over the time of a synchronous write. Writers sharing each sync
// could at best make Writers decisions per synchronous write; see Bound.
// Run it in the same Compare as the logs (Config.Disk), so that it shares
// the machine's state with them.
func DiskStore() Store {
	return Store{Name: DiskName, Open: openDisk, Writers: 1}
}

// DiskName is the name of DiskStore's results.
const DiskName = "disk"

// diskFileSize is how much of the probe's file is preallocated; writes
// wrap around.
const diskFileSize = 4 << 20

// diskProbe is DiskStore's Log.
type diskProbe struct {
	mu    sync.Mutex
	f     *os.File
	fd    int
	off   int64
	buf   []byte
	syncs atomic.Int64
}

func openDisk(dir string) (Log, io.Closer, error) {
	f, err := os.OpenFile(filepath.Join(dir, "probe"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, nil, err
	}
	if _, err := f.WriteAt(make([]byte, diskFileSize), 0); err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, nil, err
	}
	rec, err := Record(time.Now())
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	payload, err := rec.MarshalBinary()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	buf := make([]byte, 9+len(payload)) // a frame of the embedded log
	for i := range buf {
		buf[i] = byte(i) | 1
	}
	p := &diskProbe{f: f, fd: int(f.Fd()), buf: buf}
	return p, f, nil
}

// LogCommit writes one record-sized buffer after the last and syncs it.
func (p *diskProbe) LogCommit(ctx context.Context, _ xa.CommitRecord) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off+int64(len(p.buf)) > diskFileSize {
		p.off = 0
	}
	if _, err := p.f.WriteAt(p.buf, p.off); err != nil {
		return fmt.Errorf("logbench: disk probe: %w", err)
	}
	p.off += int64(len(p.buf))
	if err := unix.Fdatasync(p.fd); err != nil {
		return fmt.Errorf("logbench: disk probe: fdatasync: %w", err)
	}
	p.syncs.Add(1)
	return nil
}

func (p *diskProbe) Forget(context.Context, xa.GlobalID) error { return nil }

func (p *diskProbe) SyncCount() int64 { return p.syncs.Load() }

// SyncTime returns the time of one synchronous write that a DiskStore
// result measured, 0 for another store's.
func (r Result) SyncTime() time.Duration {
	if r.Store != DiskName || r.Decisions == 0 {
		return 0
	}
	return r.Elapsed / time.Duration(r.Decisions)
}

// Bound returns what the disk allows writers concurrent writers, from the
// DiskStore result among results measured with them: writers divided by
// the time of one synchronous write (every writer's decision in every
// sync). 0 when results hold no such figure.
func Bound(results []Result, writers int) float64 {
	for _, r := range results {
		if st := r.SyncTime(); st > 0 && r.Writers == writers {
			return float64(writers) / st.Seconds()
		}
	}
	return 0
}
