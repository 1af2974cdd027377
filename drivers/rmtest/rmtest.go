// Package rmtest is the conformance suite every resource manager passes
// against a real database: the xa.ResourceManager and xa.Branch contracts,
// and the facts of docs/xa-facts.md that both databases share.
// Database-specific facts are tested in each driver's own package.
//
// A driver's test calls Run with a Target that knows how to open the
// driver on a fresh database and how to do work through its session.
package rmtest

import (
	"context"
	"testing"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// Target adapts one driver to the suite.
type Target struct {
	// Flavor is "mariadb", "mysql" or "postgres".
	Flavor string

	// Open returns a resource manager on db (a fresh database whose table
	// kv (k INT PRIMARY KEY, v INT NOT NULL) the suite has created).
	// Each call returns a new, independent instance with its own pool, as
	// another process would have; the suite closes it with t.Cleanup
	// registered by Open.
	Open func(t testing.TB, db *dbtest.DB) xa.ResourceManager

	// Put inserts or updates row k to v through a branch's session
	// (Branch.Session()).
	Put func(ctx context.Context, session any, k, v int) error

	// Get reads row k through a branch's session; ok is false when
	// there is no such row.
	Get func(ctx context.Context, session any, k int) (v int, ok bool, err error)

	// Exec runs one statement through a branch's session (to test what
	// the session refuses or how errors surface).
	Exec func(ctx context.Context, session any, query string) error
}
