package sqllog

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
