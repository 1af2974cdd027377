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

	"github.com/xadb/xa/xa"
)

// Target adapts one driver to the suite. The suite imports no test rig:
// the driver's test gives it databases (from whatever starts servers in
// that module: internal/testrig/dbtest here).
type Target struct {
	// Kind is the participant kind: "mysql" (also MariaDB) or "postgres";
	// it selects the SQL dialect of the suite's own statements.
	Kind string

	// Database returns a fresh, empty database on a shared server, where
	// other tests run too.
	Database func(t testing.TB) Database

	// PrivateDatabase returns a fresh database on a server of its own,
	// which the suite may stop, kill and start.
	PrivateDatabase func(t testing.TB) (Database, Server)

	// Open returns a resource manager on the database dsn (where the suite
	// has created table kv (k INT PRIMARY KEY, v INT NOT NULL)). Each call
	// returns a new, independent instance with its own pool, as another
	// process would have; the suite closes it with t.Cleanup registered by
	// Open.
	Open func(t testing.TB, dsn string) xa.ResourceManager

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

// Database is a database the suite may use.
type Database interface {
	// DSN is the driver's DSN for the database, with full rights on it.
	DSN() string
}

// Server is a database server of the test's own.
type Server interface {
	Stop(t testing.TB)  // clean shutdown
	Kill(t testing.TB)  // kill -9
	Start(t testing.TB) // start again, same data
}
