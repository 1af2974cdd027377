// Package layout holds no code: its test enforces the module's rooms with
// go list, so that a wrong import fails the build's tests, not a review.
//
//   - product: what users and operators run or import (xa, the drivers,
//     recovery and its decision log, metrics, the sink, xactl and its
//     configuration); within it, the sink's rooms: its contracts and
//     their drivers (sink), the SQL sink (sink/sqlsink) and the sources
//     (sink/*source);
//   - lab: internal/lab (the demo, the benchmark, crash injection, Pebble),
//     run by xalab (cmd/xalab);
//   - test rigs: real servers, in-memory participants, fault proxies
//     (testRigs);
//   - exported test helpers: packages other modules' tests may import
//     (drivers/rmtest, recovery/logtest).
//
// Only non-test imports are checked (go list -deps without -test): a
// product package's tests may use the rigs.
package layout_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/xadb/xa"

// testRigs are the packages (and their sub-packages) that give tests
// servers, participants and faults. When they move, change this line.
var testRigs = []string{"internal/testrig/dbtest", "internal/testrig/memrm", "internal/testrig/faultproxy", "internal/testrig/localdb"}

// lab is the lab's room.
const lab = "internal/lab"

// product are the product's packages, as go list patterns.
var product = []string{"xa", "drivers/...", "recovery", "recovery/filelog", "recovery/sqllog", "internal/logdb", "metrics", "otelxa", "sink/...", "internal/cli", "internal/config", "cmd/xactl"}

// The sink's rooms, as database/sql splits its API from its drivers and
// franz-go its client from its admin API: sinkContracts holds the
// contracts (Record, Source, Committer, Owner, Restorer) and their
// drivers (Runner over the checkpoint machine, External); sqlSink
// implements them over SQL databases; the sources implement Source.
const (
	sinkContracts = "sink"
	sqlSink       = "sink/sqlsink"
)

// sinkSources are the sources: sink/<kind>source.
var sinkSources = []string{"sink/kafkasource", "sink/filesource", "sink/gensource"}

// testHelpers are the exported test helpers: test code, importable by
// other modules, so nothing under internal/.
var testHelpers = []string{"drivers/rmtest", "recovery/logtest"}

// operatorBinary is the operator's program: it carries no test code.
const operatorBinary = "cmd/xactl"

// Third-party modules the product must not carry.
var (
	pebble  = []string{"github.com/cockroachdb/pebble"}
	drivers = []string{module + "/drivers", "github.com/go-sql-driver/mysql", "github.com/jackc/pgx"}
	// dataLayers are the data-access libraries internal/datalayer's tests
	// run on enlisted sessions: test-only dependencies.
	dataLayers = []string{"gorm.io", "github.com/jmoiron/sqlx", "github.com/uptrace/bun", "entgo.io", module + "/internal/datalayer"}
	// otelSDK: the product speaks OpenTelemetry's API only; the
	// application brings the SDK.
	otelSDK = []string{"go.opentelemetry.io/otel/sdk"}
)

// pkg is one package as go list -deps -json describes it.
type pkg struct {
	ImportPath   string
	Standard     bool
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// graph is a package and everything it depends on, by import path.
type graph struct {
	root string
	pkgs map[string]pkg
}

// goList runs go list -e -json with args and decodes the packages.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-json"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var ps []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
		}
		ps = append(ps, p)
	}
	return ps
}

var (
	graphsMu sync.Mutex
	graphs   = map[string]graph{}
)

// deps returns the non-test dependency graph of the package path (relative
// to the module), from go list -deps.
func deps(t *testing.T, path string) graph {
	t.Helper()
	graphsMu.Lock()
	defer graphsMu.Unlock()
	if g, ok := graphs[path]; ok {
		return g
	}
	g := graph{root: module + "/" + path, pkgs: map[string]pkg{}}
	for _, p := range goList(t, "-deps", g.root) {
		g.pkgs[p.ImportPath] = p
	}
	if _, ok := g.pkgs[g.root]; !ok {
		t.Fatalf("go list -deps %s: the package itself is not listed", g.root)
	}
	graphs[path] = g
	return g
}

// expand returns the module's packages that match the patterns (relative
// to the module), relative to the module.
func expand(t *testing.T, patterns ...string) []string {
	t.Helper()
	var args []string
	for _, p := range patterns {
		args = append(args, module+"/"+p)
	}
	var out []string
	for _, p := range goList(t, args...) {
		out = append(out, strings.TrimPrefix(p.ImportPath, module+"/"))
	}
	return out
}

// under tells whether path is prefix or below it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// chain returns how g's root reaches dep: root -> ... -> dep.
func (g graph) chain(dep string) string {
	from := map[string]string{g.root: ""}
	queue := []string{g.root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == dep {
			break
		}
		for _, i := range g.pkgs[p].Imports {
			if _, seen := from[i]; !seen {
				from[i] = p
				queue = append(queue, i)
			}
		}
	}
	var path []string
	for p := dep; p != ""; p = from[p] {
		path = append(path, strings.TrimPrefix(p, module+"/"))
		if _, ok := from[p]; !ok {
			break
		}
	}
	slices.Reverse(path)
	return strings.Join(path, " -> ")
}

// forbid fails t for every dependency of g under one of the prefixes that
// a package not under them imports: where the rule is broken, not all that
// comes with it.
func (g graph) forbid(t *testing.T, why string, prefixes ...string) {
	t.Helper()
	g.report(t, why, func(path string) bool {
		return path != g.root && slices.ContainsFunc(prefixes, func(p string) bool { return under(path, p) })
	})
}

// report fails t for every package of g that bad says is bad and that a
// good package imports, with how the root reaches it.
func (g graph) report(t *testing.T, why string, bad func(path string) bool) {
	t.Helper()
	var found []string
	for path, p := range g.pkgs {
		if bad(path) {
			continue
		}
		for _, i := range p.Imports {
			if bad(i) && !slices.Contains(found, i) {
				found = append(found, i)
			}
		}
	}
	slices.Sort(found)
	for _, dep := range found {
		t.Errorf("%s: %s", why, g.chain(dep))
	}
}

func modulePaths(rel []string) []string {
	out := make([]string, len(rel))
	for i, r := range rel {
		out[i] = module + "/" + r
	}
	return out
}

// TestProductImportsNoLabNorRig: the product carries no lab code, no test
// rig and no Pebble.
func TestProductImportsNoLabNorRig(t *testing.T) {
	t.Parallel()
	banned := append(modulePaths(append([]string{lab}, testRigs...)), pebble...)
	for _, p := range expand(t, product...) {
		if slices.Contains(testHelpers, p) {
			continue // test code: TestHelpersImportNoInternal
		}
		deps(t, p).forbid(t, "product package "+p+" depends on lab, test-rig or Pebble code", banned...)
	}
}

// TestProductImportsNoDataLayerNorOtelSDK: the data-access libraries
// are test-only dependencies (internal/datalayer runs them on enlisted
// sessions), and the product traces through OpenTelemetry's API alone.
func TestProductImportsNoDataLayerNorOtelSDK(t *testing.T) {
	t.Parallel()
	banned := append(append([]string{}, dataLayers...), otelSDK...)
	for _, p := range expand(t, product...) {
		deps(t, p).forbid(t, "product package "+p+" depends on a data-access library or the OpenTelemetry SDK", banned...)
	}
}

// TestOperatorBinaryHasNoTestCode: xactl does not link package testing
// (test code that leaked into a product package would bring it).
func TestOperatorBinaryHasNoTestCode(t *testing.T) {
	t.Parallel()
	deps(t, operatorBinary).forbid(t, operatorBinary+" links test code", "testing")
}

// TestNothingImportsCmd: commands are thin wiring; no package, test or
// not, imports one.
func TestNothingImportsCmd(t *testing.T) {
	t.Parallel()
	for _, p := range goList(t, module+"/...") {
		for _, imports := range [][]string{p.Imports, p.TestImports, p.XTestImports} {
			for _, i := range imports {
				if under(i, module+"/cmd") {
					t.Errorf("%s imports %s: a command is not a library", p.ImportPath, i)
				}
			}
		}
	}
}

// TestCoreImportsOnlyStd: the protocol core (xa) depends on the standard
// library alone: no driver, no decision log, no metrics library.
func TestCoreImportsOnlyStd(t *testing.T) {
	t.Parallel()
	g := deps(t, "xa")
	g.report(t, "xa depends on a package outside the standard library", func(path string) bool {
		return path != g.root && path != "C" && !g.pkgs[path].Standard // C: cgo's pseudo-package
	})
}

// TestRecoveryImportsNoDriver: the recovery scanner and its decision log
// work with any participant, through xa.ResourceManager.
func TestRecoveryImportsNoDriver(t *testing.T) {
	t.Parallel()
	for _, p := range expand(t, "recovery/...") {
		deps(t, p).forbid(t, p+" depends on a driver", drivers...)
	}
}

// TestHelpersImportNoInternal: exported test helpers are imported by other
// modules' tests, which cannot have this module's internal packages.
func TestHelpersImportNoInternal(t *testing.T) {
	t.Parallel()
	for _, p := range testHelpers {
		t.Run(strings.ReplaceAll(p, "/", "_"), func(t *testing.T) {
			deps(t, p).forbid(t, fmt.Sprintf("exported test helper %s depends on an internal package", p), module+"/internal")
		})
	}
}

// TestSinkContractsImportNoImplementation: the sink's contracts and their
// drivers depend on the standard library and the protocol core (xa) only:
// no SQL sink, no source, no driver, no database library.
func TestSinkContractsImportNoImplementation(t *testing.T) {
	t.Parallel()
	g := deps(t, sinkContracts)
	g.report(t, sinkContracts+" depends on more than the standard library and xa", func(path string) bool {
		return path != g.root && path != "C" && !g.pkgs[path].Standard && !under(path, module+"/xa")
	})
}

// TestSinkSourcesImportNoSQLSink: a source implements the contracts; it
// knows neither the SQL sink nor a database driver.
func TestSinkSourcesImportNoSQLSink(t *testing.T) {
	t.Parallel()
	for _, p := range sinkSources {
		deps(t, p).forbid(t, "source "+p+" depends on the SQL sink or a driver", append([]string{module + "/" + sqlSink}, drivers...)...)
	}
}
