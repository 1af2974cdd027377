package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/xadb/xa/drivers/rmtest"
	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// The shared conformance suite: the xa.ResourceManager and xa.Branch
// contracts against a real PostgreSQL.
func TestConformance(t *testing.T) {
	rmtest.Run(t, rmtest.Target{
		Kind:     "postgres",
		Database: func(t testing.TB) rmtest.Database { return dbtest.ForKind(t, "postgres") },
		PrivateDatabase: func(t testing.TB) (rmtest.Database, rmtest.Server) {
			srv := dbtest.NewPostgresServer(t)
			return srv.CreateDB(t), srv
		},
		Open: func(t testing.TB, dsn string) xa.ResourceManager { return openRM(t, dsn) },
		Put: func(ctx context.Context, session any, k, v int) error {
			_, err := session.(*Conn).Exec(ctx,
				"INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", k, v)
			return err
		},
		Get: func(ctx context.Context, session any, k int) (int, bool, error) {
			var v int
			err := session.(*Conn).QueryRow(ctx, "SELECT v FROM kv WHERE k = $1", k).Scan(&v)
			if errors.Is(err, pgx.ErrNoRows) {
				return 0, false, nil
			}
			return v, err == nil, err
		},
		Exec: func(ctx context.Context, session any, query string) error {
			_, err := session.(*Conn).Exec(ctx, query)
			return err
		},
	})
}
