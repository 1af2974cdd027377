package xa

import (
	"fmt"
	"strings"
	"time"
)

// Severity grades a Finding.
type Severity int

const (
	SeverityOK Severity = 1 + iota
	SeverityWarn
	SeverityFail
)

func (s Severity) String() string {
	switch s {
	case SeverityOK:
		return "ok"
	case SeverityWarn:
		return "warn"
	case SeverityFail:
		return "FAIL"
	}
	return "Severity(invalid)"
}

// Finding is one result of a participant's start-up check (version, XA
// settings, prepared-transaction slots, privileges): what was looked at,
// what was found and, unless it is fine, how to fix it.
type Finding struct {
	Name     string
	Value    string
	Severity Severity
	Fix      string
}

// CheckFindings returns an error wrapping ErrMisconfigured that lists every
// failing finding with its fix, or nil when none fails.
func CheckFindings(rm string, fs []Finding) error {
	var b strings.Builder
	for _, f := range fs {
		if f.Severity != SeverityFail {
			continue
		}
		fmt.Fprintf(&b, "\n  %s = %s: %s", f.Name, f.Value, f.Fix)
	}
	if b.Len() == 0 {
		return nil
	}
	return &Error{Op: "check", RM: rm, Kind: ErrMisconfigured, Err: fmt.Errorf("%s", b.String())}
}

// MaxClockSkew is the clock difference from which ClockFinding warns.
const MaxClockSkew = 5 * time.Second

// ClockFinding compares a server's clock with this machine's: server is
// the server's time, read by a query sent at sent whose reply came at
// received (this machine's clock). Recovery measures ages on one clock
// where it can, and its safety does not depend on clocks (the fence), but
// a skew makes presumed abort come early or late: it warns from
// MaxClockSkew.
func ClockFinding(server, sent, received time.Time) Finding {
	skew := server.Sub(sent.Add(received.Sub(sent) / 2))
	f := Finding{Name: "clock skew", Value: skew.Round(time.Millisecond).String(), Severity: SeverityOK}
	if skew > MaxClockSkew || skew < -MaxClockSkew {
		f.Severity = SeverityWarn
		f.Fix = "synchronise the clocks (NTP): branch ages, grace periods and restart detection compare them"
	}
	return f
}
