package sqlsink

// SetHook makes s call f at the protocol's steps: "flushed" (rows sent,
// nothing prepared), "prepared", "decided" (before phase two) and "phase2"
// (after the first branch's commit, when there are several). An error
// from f stops the step there.
func SetHook(s *Sink, f func(step string, h Handle) error) { s.hook = f }

// Abandon simulates a crash of s: every session is closed at once and
// nothing more is sent.
func Abandon(s *Sink) { s.abandon() }
