package memrm_test

import (
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/recovery/logtest"
	"github.com/xadb/xa/xa"
)

// TestLogConformance runs the decision-log conformance suite. The log is in
// memory: a reopen is a Kill and Revive of the same log, as a restarted
// process that finds the records its predecessor stored.
func TestLogConformance(t *testing.T) {
	logtest.Run(t, logtest.Harness{
		New: func(t *testing.T, ident xa.LogIdentity, now func() time.Time) xa.RecoveryLog {
			l := memrm.NewLogFor(ident)
			l.SetClock(now)
			return l
		},
		Reopen: func(t *testing.T, l xa.RecoveryLog) xa.RecoveryLog {
			m := l.(*memrm.Log)
			m.Kill()
			m.Revive()
			return m
		},
	})
}

func TestNewLog(t *testing.T) {
	l := memrm.NewLog("n1")
	if id := l.Identity(); id.Node != "n1" || id.ID == 0 || id.Timeout != xa.DefaultTimeout || id.Validate() != nil {
		t.Fatalf("NewLog(n1).Identity() = %+v", id)
	}
	if memrm.NewLog("n1").Identity().ID == l.Identity().ID {
		t.Fatal("two logs share an id")
	}
}
