package sinkbench

import (
	"context"
	"syscall"
	"time"

	"github.com/xadb/xa/internal/lab/servercpu"
)

// Cost is what one measurement cost, from counters read before and after
// it: where a mode is slower than another, this says why (CPU here or in
// a server, statements, flushes). A figure that could not be read is -1.
type Cost struct {
	// ClientCPU is this process's CPU time (the generator, the mapping,
	// the drivers, the sink).
	ClientCPU time.Duration
	// MySQLCPU and PostgresCPU are the servers' CPU time (PostgreSQL: the
	// postmaster and every backend and helper process); -1 when the server
	// runs elsewhere.
	MySQLCPU, PostgresCPU time.Duration
	// MySQLStatements counts the statements MySQL ran (Questions: every
	// round trip's statements, COMMIT and XA ones included).
	MySQLStatements int64
	// MySQLRedoBytes and PostgresWALBytes are the bytes of log written
	// (Innodb_lsn_current; pg_current_wal_lsn()).
	MySQLRedoBytes, PostgresWALBytes int64
}

// counters is a reading of what Cost is made of.
type counters struct {
	client, my, pg        time.Duration
	statements, redo, wal int64
}

// read takes a reading.
func (s *Setup) read(ctx context.Context) counters {
	var c counters
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		c.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c.my, c.pg = -1, -1
	c.statements, c.redo, c.wal = -1, -1, -1
	if pid := s.myPID(ctx); pid > 0 {
		c.my = servercpu.Process(pid)
	}
	if pid := s.pgPID(ctx); pid > 0 {
		c.pg = servercpu.Tree(pid)
	}
	rows, err := s.my.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Innodb_lsn_current')")
	if err == nil {
		for rows.Next() {
			var name string
			var v int64
			if rows.Scan(&name, &v) == nil {
				switch name {
				case "Questions":
					c.statements = v
				case "Innodb_lsn_current":
					c.redo = v
				}
			}
		}
		rows.Close()
	}
	s.pg.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").Scan(&c.wal) //nolint:errcheck // -1 stays
	return c
}

// cost returns what happened between readings a and b.
func cost(a, b counters) Cost {
	sub := func(x, y int64) int64 {
		if x < 0 || y < 0 {
			return -1
		}
		return y - x
	}
	dur := func(x, y time.Duration) time.Duration {
		if x < 0 || y < 0 {
			return -1
		}
		return y - x
	}
	return Cost{ClientCPU: b.client - a.client, MySQLCPU: dur(a.my, b.my), PostgresCPU: dur(a.pg, b.pg),
		MySQLStatements: sub(a.statements, b.statements), MySQLRedoBytes: sub(a.redo, b.redo), PostgresWALBytes: sub(a.wal, b.wal)}
}

// myPID returns the MySQL server's process id when it runs on this
// machine, else 0.
func (s *Setup) myPID(ctx context.Context) int {
	s.pidOnce.Do(func() {
		s.myServer = servercpu.MySQLPID(ctx, s.my)
		s.pgServer = servercpu.PostgresPID(ctx, s.pg)
	})
	return s.myServer
}

// pgPID returns the postmaster's process id when it runs on this machine.
func (s *Setup) pgPID(ctx context.Context) int {
	s.myPID(ctx)
	return s.pgServer
}
