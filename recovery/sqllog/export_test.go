package sqllog

import "context"

// Abandon stops l's lease renewal and group commit without releasing the
// lease, as if its process had been killed: the lease expires by the
// database's clock.
func Abandon(l *Log) {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	if l.b != nil {
		l.b.close()
	}
	if l.stopRenew != nil {
		close(l.stopRenew)
		<-l.renewDone
	}
}

// SetOffset sets l's measured clock offset (µs), for the test that shows
// what happens without it.
func SetOffset(l *Log, us int64) { l.offset.Store(us) }

// SendJSON makes s send PostgreSQL batches as JSON, as with a driver that
// does not pass Go slices as arrays.
func SendJSON(s *Store) { s.arrays.Store(-1) }

// NativeArrays reports whether s sends PostgreSQL batches as typed arrays.
func NativeArrays(ctx context.Context, s *Store) bool { return s.nativeArrays(ctx) }
