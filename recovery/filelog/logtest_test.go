package filelog

import (
	"testing"
	"time"

	"github.com/xadb/xa/recovery/logtest"
	"github.com/xadb/xa/xa"
)

// TestConformance runs the decision-log conformance suite on filelog with
// real syncs; a reopen is Close and Open.
func TestConformance(t *testing.T) {
	logtest.Run(t, logtest.Harness{
		New: func(t *testing.T, ident xa.LogIdentity, now func() time.Time) xa.RecoveryLog {
			l, err := Create(t.TempDir(), ident, Options{Now: now})
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			t.Cleanup(func() { l.closeOnce(t) })
			return l
		},
		Reopen: func(t *testing.T, lg xa.RecoveryLog) xa.RecoveryLog {
			l := lg.(*Log)
			mustClose(t, l)
			r, err := Open(l.dir, l.opts)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { r.closeOnce(t) })
			return r
		},
	})
}
