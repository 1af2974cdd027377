package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/recovery/filelog"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// packetCounter is a loopback proxy that counts the client's writes: with
// a request/response protocol and one worker, a round trip each.
type packetCounter struct {
	ln    net.Listener
	reads atomic.Int64
}

func newPacketCounter(t *testing.T, target string) *packetCounter {
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
				for {
					n, err := cl.Read(buf)
					if n > 0 {
						c.reads.Add(1)
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

// TestRoundTrips counts the round trips of one transfer on each database:
// the transaction manager must need no more than 3 on each (XA START or
// BEGIN with the first statement, END+PREPARE together, COMMIT), fewer
// than the hand-written 2PC; with PostgreSQL as the last resource, 2 there.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	my, pg := dbtest.MySQLDB(t), dbtest.PostgresDB(t)
	myC := newPacketCounter(t, fmt.Sprintf("%s:%d", my.Server.Host, my.Server.Port))
	pgC := newPacketCounter(t, fmt.Sprintf("%s:%d", pg.Server.Host, pg.Server.Port))
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
	for _, m := range []Mode{Raw, TM, Last} {
		for i := 0; i < 5; i++ { // warm the pools and caches
			if err := s.Transfer(ctx, m, 0, i); err != nil {
				t.Fatal(err)
			}
		}
		const batches, n = 5, 10
		least := [2]int64{-1, -1}
		for range batches {
			m0, p0 := myC.reads.Load(), pgC.reads.Load()
			for i := 0; i < n; i++ {
				if err := s.Transfer(ctx, m, 0, i); err != nil {
					t.Fatal(err)
				}
			}
			for k, d := range []int64{myC.reads.Load() - m0, pgC.reads.Load() - p0} {
				if least[k] < 0 || d < least[k] {
					least[k] = d
				}
			}
		}
		perOp[m] = [2]float64{float64(least[0]) / n, float64(least[1]) / n}
		t.Logf("%s: %.2f round trips to MySQL, %.2f to PostgreSQL per transfer (least of %d batches of %d)", m, perOp[m][0], perOp[m][1], batches, n)
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
