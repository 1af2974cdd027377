package sinkbench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// ticks is the kernel's clock tick (USER_HZ): 100 on Linux.
const ticks = 100

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
		if f, ok := procStat(pid); ok && len(f) > 12 {
			c.my = (f[11] + f[12]) * time.Second / ticks
		}
	}
	if pid := s.pgPID(ctx); pid > 0 {
		c.pg = treeCPU(pid)
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
// machine (its pid file is readable), else 0.
func (s *Setup) myPID(ctx context.Context) int {
	s.pidOnce.Do(func() {
		var file, dir string
		if s.my.QueryRowContext(ctx, "SELECT @@pid_file, @@datadir").Scan(&file, &dir) == nil {
			if !filepath.IsAbs(file) {
				file = filepath.Join(dir, file)
			}
			s.myServer = readPID(file)
		}
		if s.pg.QueryRow(ctx, "SHOW data_directory").Scan(&dir) == nil {
			s.pgServer = readPID(filepath.Join(dir, "postmaster.pid"))
		}
	})
	return s.myServer
}

// pgPID returns the postmaster's process id when it runs on this machine.
func (s *Setup) pgPID(ctx context.Context) int {
	s.myPID(ctx)
	return s.pgServer
}

// readPID reads the first line of a pid file, 0 if it is not there (or
// names no process of this machine's).
func readPID(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	if _, ok := procStat(pid); !ok {
		return 0
	}
	return pid
}

// procStat returns the fields of /proc/pid/stat after the pid and the
// command (proc(5)'s fields 3 on): f[0] is the state, f[1] the parent,
// f[11] to f[14] utime, stime, cutime and cstime in clock ticks.
func procStat(pid int) ([]time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	fs := strings.Fields(string(b[i+1:]))
	out := make([]time.Duration, len(fs))
	for j, f := range fs {
		n, _ := strconv.ParseInt(f, 10, 64)
		out[j] = time.Duration(n)
	}
	return out, true
}

// treeCPU returns the CPU time of pid, of its children that ended (and
// were waited for), and of its living children: a PostgreSQL server's.
func treeCPU(pid int) time.Duration {
	f, ok := procStat(pid)
	if !ok || len(f) < 15 {
		return -1
	}
	total := f[11] + f[12] + f[13] + f[14]
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cf, ok := procStat(child)
		if ok && len(cf) > 12 && int(cf[1]) == pid {
			total += cf[11] + cf[12]
		}
	}
	return total * time.Second / ticks
}
