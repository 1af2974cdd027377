package mysql

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/xadb/xa/drivers/rmtest"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// The shared conformance suite: the xa.ResourceManager and xa.Branch
// contracts against the real server.
func TestConformance(t *testing.T) {
	rmtest.Run(t, rmtest.Target{
		Kind:     "mysql",
		Database: func(t testing.TB) rmtest.Database { return dbtest.ForKind(t, "mysql") },
		PrivateDatabase: func(t testing.TB) (rmtest.Database, rmtest.Server) {
			srv := dbtest.NewMySQLServer(t)
			return srv.CreateDB(t), srv
		},
		Open: func(t testing.TB, dsn string) xa.ResourceManager { return openRM(t, dsn) },
		Put: func(ctx context.Context, session any, k, v int) error {
			_, err := session.(*Conn).ExecContext(ctx,
				"INSERT INTO kv (k, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)", k, v)
			return err
		},
		Get: func(ctx context.Context, session any, k int) (int, bool, error) {
			var v int
			err := session.(*Conn).QueryRowContext(ctx, "SELECT v FROM kv WHERE k = ?", k).Scan(&v)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			return v, err == nil, err
		},
		Exec: func(ctx context.Context, session any, query string) error {
			_, err := session.(*Conn).ExecContext(ctx, query)
			return err
		},
	})
}
