package crashpoint

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadb/xa/internal/testrig/memrm"
	"github.com/xadb/xa/xa"
)

func TestParse(t *testing.T) {
	for _, bad := range []string{"log", "log:0", "flush:1", "commit:x"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestFiresOnNthPass(t *testing.T) {
	tr, err := Parse("commit:2")
	if err != nil {
		t.Fatal(err)
	}
	fired := 0
	tr.Kill = func() { fired++ }
	rm := tr.WrapRM(memrm.New("a", memrm.NewDB(), nil))
	log := tr.WrapLog(memrm.NewLog("n"))
	mgr, _ := xa.NewManager(xa.Config{Node: "n", Log: log})
	rm2 := tr.WrapRM(memrm.New("b", memrm.NewDB(), nil))
	for i := 0; i < 3; i++ {
		_, err := mgr.Run(context.Background(), func(ctx context.Context, tx *xa.Tx) error {
			for _, r := range []xa.ResourceManager{rm, rm2} {
				s, err := tx.Enlist(ctx, r)
				if err != nil {
					return err
				}
				if err := s.(*memrm.Branch).Put(ctx, i, i); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if fired != 1 || tr.seen["commit"] != 6 || tr.seen["prepare"] != 6 || tr.seen["log"] != 3 {
		t.Fatalf("fired %d, seen %v", fired, tr.seen)
	}
}

// TestProxy: the proxy forwards both ways, and the point is passed right
// before the data holding the n-th match is forwarded, also when the
// match is split between two writes.
func TestProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	received := make(chan string, 16)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 1024)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				received <- string(buf[:n])
				c.Write(buf[:n]) //nolint:errcheck // echo
			}
			if err != nil {
				return
			}
		}
	}()
	tr, err := Parse("pgcommit:2")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got strings.Builder // what the server received
	fired := make(chan string, 1)
	tr.Kill = func() {
		mu.Lock()
		defer mu.Unlock()
		fired <- got.String()
	}
	addr, stop, err := tr.Proxy(ln.Addr().String(), "pgcommit", PGCommit)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(s string) {
		t.Helper()
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		echo := make([]byte, len(s))
		if _, err := io.ReadFull(c, echo); err != nil || string(echo) != s {
			t.Fatalf("echo %q, %v; want %q", echo, err, s)
		}
		r := <-received
		mu.Lock()
		got.WriteString(r)
		mu.Unlock()
	}
	send("BEGIN; COMMIT PREPARED 'a'")
	select {
	case <-fired:
		t.Fatal("fired at the first match")
	default:
	}
	send("COMMIT PRE")
	if _, err := c.Write([]byte("PARED 'b'")); err != nil {
		t.Fatal(err)
	}
	select {
	case before := <-fired:
		if before != "BEGIN; COMMIT PREPARED 'a'COMMIT PRE" {
			t.Errorf("fired after the server got %q", before)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second match did not fire")
	}
}
