package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/filelog"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// packetCounter is a loopback proxy that counts the client's writes: with
// a request/response protocol and one worker, a round trip each. It also
// counts the statements the client sends (see statements).
type packetCounter struct {
	ln         net.Listener
	reads      atomic.Int64
	statements atomic.Int64
}

// protocol says how packetCounter counts statements in what a client sends.
type protocol int

const (
	mysqlWire    protocol = 1 + iota // COM_QUERY (each statement of a multi-statement query), COM_STMT_EXECUTE
	postgresWire                     // each statement of a simple Query, each Execute of the extended protocol
)

func newPacketCounter(t *testing.T, target string, proto protocol) *packetCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c := &packetCounter{ln: ln}
	go func() {
		for {
			cl, err := ln.Accept()
			if err != nil {
				return
			}
			sv, err := net.Dial("tcp", target)
			if err != nil {
				cl.Close()
				continue
			}
			go func() {
				buf := make([]byte, 64<<10)
				var pending []byte
				started := proto == mysqlWire // PostgreSQL's first message has no type byte
				for {
					n, err := cl.Read(buf)
					if n > 0 {
						c.reads.Add(1)
						pending = append(pending, buf[:n]...)
						var k int64
						pending, started, k = countStatements(proto, pending, started)
						c.statements.Add(k)
						sv.Write(buf[:n]) //nolint:errcheck
					}
					if err != nil {
						sv.Close()
						return
					}
				}
			}()
			go func() { io.Copy(cl, sv); cl.Close() }() //nolint:errcheck
		}
	}()
	return c
}

// countStatements counts the statements in the complete messages at the
// start of b and returns the rest. started is false until PostgreSQL's
// start-up message (and an SSL request) went by.
func countStatements(proto protocol, b []byte, started bool) (rest []byte, _ bool, n int64) {
	for {
		switch proto {
		case mysqlWire:
			if len(b) < 4 {
				return b, started, n
			}
			size := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
			if len(b) < 4+size {
				return b, started, n
			}
			seq, payload := b[3], b[4:4+size]
			if seq == 0 && len(payload) > 0 { // a command (not the log-in's packets)
				switch payload[0] {
				case 0x03: // COM_QUERY
					n += int64(strings.Count(strings.TrimRight(string(payload[1:]), "; "), ";") + 1)
				case 0x17: // COM_STMT_EXECUTE
					n++
				}
			}
			b = b[4+size:]
		case postgresWire:
			if !started {
				if len(b) < 8 {
					return b, started, n
				}
				size := int(binary.BigEndian.Uint32(b))
				if len(b) < size {
					return b, started, n
				}
				code := binary.BigEndian.Uint32(b[4:])
				started = code != 80877103 && code != 80877104 // SSLRequest, GSSENCRequest
				b = b[size:]
				continue
			}
			if len(b) < 5 {
				return b, started, n
			}
			size := 1 + int(binary.BigEndian.Uint32(b[1:]))
			if len(b) < size {
				return b, started, n
			}
			switch b[0] {
			case 'Q':
				n += int64(strings.Count(strings.TrimRight(string(b[5:size]), "; \x00"), ";") + 1)
			case 'E':
				n++
			}
			b = b[size:]
		}
	}
}

// TestRoundTrips counts the round trips of one transfer on each database:
// the transaction manager must need no more than 3 on each (XA START or
// BEGIN with the first statement, END+PREPARE together, COMMIT), fewer
// than the hand-written 2PC; with PostgreSQL as the last resource, 2 there.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	myC := newPacketCounter(t, fmt.Sprintf("%s:%d", my.Server.Host, my.Server.Port), mysqlWire)
	pgC := newPacketCounter(t, fmt.Sprintf("%s:%d", pg.Server.Host, pg.Server.Port), postgresWire)
	mc, _ := gomysql.ParseDSN(my.DSN())
	mc.Addr = myC.ln.Addr().String()
	pcfg, _ := pgx.ParseConfig(pg.DSN())
	pgDSN := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pcfg.User, pgC.ln.Addr(), pcfg.Database)
	l, err := CreateLog(t.TempDir()+"/log", filelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := Open(ctx, mc.FormatDSN(), pgDSN, 1, 100, l)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The recovery scanner of the last-resource mode talks to both
	// databases on its own: stop it. Anything else in the background
	// (pool health checks) is kept out by taking, per database, the
	// smallest count of several batches.
	s.stopRecovery()
	perOp := map[Mode][2]float64{}
	for _, m := range []Mode{Raw, RawLog, TM, Async, Last} {
		for i := 0; i < 5; i++ { // warm the pools and caches
			if err := s.Transfer(ctx, m, 0, i); err != nil {
				t.Fatal(err)
			}
		}
		const batches, n = 5, 10
		least := [2]int64{-1, -1}
		leastStmts := [2]int64{-1, -1}
		for range batches {
			m0, p0 := myC.reads.Load(), pgC.reads.Load()
			ms0, ps0 := myC.statements.Load(), pgC.statements.Load()
			for i := 0; i < n; i++ {
				if err := s.Transfer(ctx, m, 0, i); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.AsyncMgr.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			for k, d := range []int64{myC.reads.Load() - m0, pgC.reads.Load() - p0} {
				if least[k] < 0 || d < least[k] {
					least[k] = d
				}
			}
			for k, d := range []int64{myC.statements.Load() - ms0, pgC.statements.Load() - ps0} {
				if leastStmts[k] < 0 || d < leastStmts[k] {
					leastStmts[k] = d
				}
			}
		}
		perOp[m] = [2]float64{float64(least[0]) / n, float64(least[1]) / n}
		t.Logf("%-8s %.2f round trips and %.2f statements to MySQL, %.2f round trips and %.2f statements to PostgreSQL per transfer (least of %d batches of %d)",
			m, perOp[m][0], float64(leastStmts[0])/n, perOp[m][1], float64(leastStmts[1])/n, batches, n)
	}
	if tm := perOp[TM]; tm[0] > 3 || tm[1] > 3 {
		t.Errorf("the transaction manager needs %.2f / %.2f round trips per transfer; want at most 3 on each", tm[0], tm[1])
	}
	if tm, raw := perOp[TM], perOp[Raw]; tm[0]+tm[1] >= raw[0]+raw[1] {
		t.Errorf("the transaction manager needs %.2f round trips, hand-written 2PC %.2f", tm[0]+tm[1], raw[0]+raw[1])
	}
	// With PostgreSQL as the last resource: BEGIN with the UPDATE, then
	// the decision row with COMMIT.
	if last := perOp[Last]; last[0] > 3 || last[1] > 2 {
		t.Errorf("with a last resource: %.2f / %.2f round trips; want at most 3 to MySQL, 2 to PostgreSQL", last[0], last[1])
	}
}
