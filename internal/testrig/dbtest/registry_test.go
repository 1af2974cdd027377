package dbtest_test

import (
	"testing"

	"github.com/xadb/xa/drivers"
	"github.com/xadb/xa/internal/testrig/dbtest"
)

// Every participant kind of the drivers registry has a test server: a new
// kind is not done until the tests can run against it.
func TestEveryKindHasAServer(t *testing.T) {
	for _, k := range drivers.Kinds() {
		if _, err := dbtest.KindOf(k.Name); err != nil {
			t.Errorf("participant kind %q: %v", k.Name, err)
		}
	}
}
