package xa_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportDirection enforces the layering: the protocol core imports no
// driver, no decision-log implementation and no metrics library; the
// recovery scanner imports no driver.
func TestImportDirection(t *testing.T) {
	rules := map[string][]string{
		"github.com/xadb/xa/xa": {
			"github.com/xadb/xa/drivers", "github.com/xadb/xa/recovery", "github.com/xadb/xa/metrics",
			"github.com/go-sql-driver/mysql", "github.com/jackc/pgx", "github.com/prometheus", "github.com/cockroachdb/pebble",
		},
		"github.com/xadb/xa/recovery": {
			"github.com/xadb/xa/drivers", "github.com/go-sql-driver/mysql", "github.com/jackc/pgx",
		},
	}
	for pkg, banned := range rules {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range banned {
				if dep == b || strings.HasPrefix(dep, b+"/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
