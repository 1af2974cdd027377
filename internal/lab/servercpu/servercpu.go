// Package servercpu reads the CPU time of the database servers a benchmark
// runs against, when they run on this machine: a MySQL/MariaDB server's
// process, and a PostgreSQL server's postmaster with every backend and
// helper process (from /proc). The benchmarks use it to say what a mode
// costs the servers, next to what it costs the client.
package servercpu

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ticks is the kernel's clock tick (USER_HZ): 100 on Linux.
const ticks = 100

// MySQLPID returns the process id of the MySQL/MariaDB server behind db
// when it runs on this machine (its pid file is readable), else 0.
func MySQLPID(ctx context.Context, db *sql.DB) int {
	var file, dir string
	if db.QueryRowContext(ctx, "SELECT @@pid_file, @@datadir").Scan(&file, &dir) != nil {
		return 0
	}
	if !filepath.IsAbs(file) {
		file = filepath.Join(dir, file)
	}
	return readPID(file)
}

// PostgresPID returns the process id of the postmaster behind pool when
// it runs on this machine, else 0.
func PostgresPID(ctx context.Context, pool *pgxpool.Pool) int {
	var dir string
	if pool.QueryRow(ctx, "SHOW data_directory").Scan(&dir) != nil {
		return 0
	}
	return readPID(filepath.Join(dir, "postmaster.pid"))
}

// Process returns the CPU time (user and system) of process pid, -1 if it
// cannot be read.
func Process(pid int) time.Duration {
	f, ok := procStat(pid)
	if !ok || len(f) < 13 {
		return -1
	}
	return (f[11] + f[12]) * time.Second / ticks
}

// Tree returns the CPU time of pid, of its children that ended (and were
// waited for), and of its living children: a PostgreSQL server's. -1 if
// pid's cannot be read.
func Tree(pid int) time.Duration {
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
