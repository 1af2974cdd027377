package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/testrig/localdb"
)

// localCtl controls a server process of internal/localdb.
type localCtl struct{ s *localdb.Server }

func (c localCtl) stop(ctx context.Context) error  { return c.s.Stop(ctx) }
func (c localCtl) kill(ctx context.Context) error  { return c.s.Kill(ctx) }
func (c localCtl) start(ctx context.Context) error { return c.s.Start(ctx) }
func (c localCtl) destroy()                        { c.s.Destroy() }
func (c localCtl) logTail() string                 { return c.s.LogTail() }

func startLocal(ctx context.Context, k Kind, settings map[string]string) (*Server, error) {
	lk := localdb.MySQL
	if k == Postgres {
		lk = localdb.Postgres
	}
	s, err := localdb.Start(ctx, lk, settings)
	if err != nil {
		if k == MySQL {
			err = fmt.Errorf("%w (is MariaDB installed? apt-get install -y mariadb-server)", err)
		}
		return nil, err
	}
	return &Server{Kind: k, Flavor: s.Flavor, Host: s.Host, Port: s.Port, user: s.User, ctl: localCtl{s}}, nil
}

func cleanupRoot() { localdb.Cleanup() }

// serverFromDSN describes a server given in the environment.
func serverFromDSN(k Kind, dsn string) (*Server, error) {
	srv := &Server{Kind: k}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch k {
	case MySQL:
		c, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("XA_MYSQL_DSN: %w", err)
		}
		host, port, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return nil, fmt.Errorf("XA_MYSQL_DSN address %q: %w", c.Addr, err)
		}
		srv.Host, srv.user, srv.pass = host, c.User, c.Passwd
		srv.Port, _ = strconv.Atoi(port)
		c.DBName = ""
		db, err := sql.Open("mysql", c.FormatDSN())
		if err != nil {
			return nil, err
		}
		defer db.Close()
		var v string
		if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
			return nil, fmt.Errorf("XA_MYSQL_DSN: %w", err)
		}
		srv.Flavor = "mysql"
		if strings.Contains(strings.ToLower(v), "mariadb") {
			srv.Flavor = "mariadb"
		}
	case Postgres:
		c, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("XA_POSTGRES_DSN: %w", err)
		}
		srv.Flavor = "postgres"
		srv.Host, srv.Port, srv.user, srv.pass = c.Host, int(c.Port), c.User, c.Password
		conn, err := pgx.ConnectConfig(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("XA_POSTGRES_DSN: %w", err)
		}
		conn.Close(ctx)
	}
	return srv, nil
}
