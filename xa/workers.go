package xa

import "time"

// workers run the actions the runner does not perform on the caller's
// goroutine (see driver.loop), on goroutines kept between transactions: a
// fresh goroutine grows its stack anew, a copy at a time, through the
// drivers' deep call chains, for every action. A worker that finds no work
// for workerIdle ends.
var workers = struct{ idle chan func() }{idle: make(chan func())}

// workerIdle is how long a worker waits for an action before it ends.
const workerIdle = 5 * time.Second

// spawn runs f on an idle worker, or on a new one.
func spawn(f func()) {
	select {
	case workers.idle <- f:
	default:
		go work(f)
	}
}

func work(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		f = nil
		idle.Reset(workerIdle)
		select {
		case f = <-workers.idle:
		case <-idle.C:
			return
		}
	}
}
