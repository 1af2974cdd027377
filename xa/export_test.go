package xa

import "time"

// SetDeadline moves tx's Begin + Timeout, as the coordinator's own checks
// read it, to d; the timer of tx's context is left alone. Tests use it as a
// prepare phase that ran past the deadline while its last vote beat the
// timer to the coordinator: the real clock cannot be made to lose that race
// on demand. Call it from the prepare of a branch (its vote then carries the
// write to the actions that read the deadline) or before Commit.
func SetDeadline(tx *Tx, d time.Time) { tx.deadline = d }
