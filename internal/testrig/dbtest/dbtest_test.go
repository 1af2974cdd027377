package dbtest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestSharedServers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	my := MySQLDB(t)
	db, err := sql.Open("mysql", my.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE x (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	pg := PostgresDB(t)
	conn, err := pgx.Connect(ctx, pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&n); err != nil || n == 0 {
		t.Fatalf("max_prepared_transactions = %d, %v; want > 0", n, err)
	}
	if my2 := MySQLDB(t); my2.Name == my.Name || my2.Server != my.Server {
		t.Fatalf("want a fresh database on the same server, got %q on %p", my2.Name, my2.Server)
	}
}

// A prepared PostgreSQL transaction survives kill -9 and restart of a
// private server: what the crash tests of later packages rely on.
func TestPrivatePostgresKillRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := NewPostgresServer(t)
	db := srv.CreateDB(t)
	if err := srv.Exec(ctx, db.Name, "CREATE TABLE x (id INT)", "BEGIN", "INSERT INTO x VALUES (1)", "PREPARE TRANSACTION 'dbtest-1'"); err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	if err := srv.Exec(ctx, db.Name, "SELECT 1"); err == nil {
		t.Fatal("server answers after kill")
	}
	srv.Start(t)
	if err := srv.Exec(ctx, db.Name, "COMMIT PREPARED 'dbtest-1'"); err != nil {
		t.Fatalf("prepared transaction lost across kill -9: %v", err)
	}
}

func TestPrivateMySQLStopStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := NewMySQLServer(t, Setting("innodb-lock-wait-timeout", "7"))
	db := srv.CreateDB(t)
	conn, err := sql.Open("mysql", db.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var name string
	var v int
	if err := conn.QueryRowContext(ctx, "SHOW VARIABLES LIKE 'innodb_lock_wait_timeout'").Scan(&name, &v); err != nil || v != 7 {
		t.Fatalf("setting not applied: %d %v", v, err)
	}
	if err := srv.Exec(ctx, db.Name, "CREATE TABLE x (id INT) ENGINE=InnoDB", "XA START 'dbtest'", "INSERT INTO x VALUES (1)", "XA END 'dbtest'", "XA PREPARE 'dbtest'"); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Exec(cctx, db.Name, "XA COMMIT 'dbtest'"); err != nil {
		t.Fatalf("prepared branch lost across restart: %v", err)
	}
	srv.Kill(t)
	srv.Start(t)
}

// Durable servers flush every commit; the shared ones skip fsync.
func TestDurableOption(t *testing.T) {
	t.Parallel()
	if envDSN(MySQL) != "" || envDSN(Postgres) != "" {
		t.Skip("servers given by DSN keep their own settings")
	}
	ctx := context.Background()
	flush := func(dsn string) int {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var v int
		if err := db.QueryRowContext(ctx, "SELECT @@innodb_flush_log_at_trx_commit").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	fsync := func(dsn string) string {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var v string
		if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := flush(NewMySQLServer(t, Durable()).CreateDB(t).DSN()); v != 1 {
		t.Errorf("durable MariaDB: innodb_flush_log_at_trx_commit = %d, want 1", v)
	}
	if v := flush(MySQLDB(t).DSN()); v != 2 {
		t.Errorf("shared MariaDB: innodb_flush_log_at_trx_commit = %d, want 2", v)
	}
	if v := fsync(NewPostgresServer(t, Durable()).CreateDB(t).DSN()); v != "on" {
		t.Errorf("durable PostgreSQL: fsync = %s, want on", v)
	}
	if v := fsync(PostgresDB(t).DSN()); v != "off" {
		t.Errorf("shared PostgreSQL: fsync = %s, want off", v)
	}
}
