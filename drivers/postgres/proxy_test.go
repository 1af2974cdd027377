package postgres

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy is a TCP proxy in front of a real PostgreSQL server for fault
// injection at the wire: it counts round trips (ReadyForQuery messages
// sent to clients) and can lose the reply to a chosen command.
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	rfq atomic.Int64 // ReadyForQuery messages forwarded to clients

	// dropCancels: cancel requests (which pgx sends on a new connection
	// when it loses one mid-command) never reach the server, as in a
	// network partition.
	dropCancels atomic.Bool

	mu        sync.Mutex
	loseReply []byte // when a client message contains it: forward it, then drop the replies and cut the connection
	lost      chan struct{}
	conns     []net.Conn
}

// newProxy starts a proxy to the server of dsn and returns it with the
// DSN that goes through it (sslmode=disable: the proxy reads the
// protocol in clear).
func newProxy(t testing.TB, dsn string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: u.Host}
	u.Host = ln.Addr().String()
	go p.serve()
	t.Cleanup(p.close)
	return p, u.String()
}

// roundTrips returns the number of round trips completed so far.
func (p *proxy) roundTrips() int64 { return p.rfq.Load() }

// loseReplyTo arms the proxy: the next client message containing s is
// delivered to the server, its reply is dropped and the connection is
// cut. The returned channel is closed when that has happened.
func (p *proxy) loseReplyTo(s string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseReply = []byte(s)
	p.lost = make(chan struct{})
	return p.lost
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// partition makes the proxy drop cancel requests from now on.
func (p *proxy) partition() { p.dropCancels.Store(true) }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go p.open(c)
	}
}

// cancelRequestCode opens a CancelRequest message (length 16).
const cancelRequestCode = 80877102

func (p *proxy) open(c net.Conn) {
	// The first message of a connection is a startup-type message:
	// length, then a code.
	var first [8]byte
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
	if _, err := io.ReadFull(c, first[:]); err != nil {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{}) //nolint:errcheck
	if p.dropCancels.Load() && binary.BigEndian.Uint32(first[:4]) == 16 && binary.BigEndian.Uint32(first[4:]) == cancelRequestCode {
		c.Close()
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, s)
	p.mu.Unlock()
	if _, err := s.Write(first[:]); err != nil {
		c.Close()
		s.Close()
		return
	}
	var drop atomic.Bool
	go p.clientToServer(c, s, &drop)
	go p.serverToClient(s, c, &drop)
}

func (p *proxy) clientToServer(c, s net.Conn, drop *atomic.Bool) {
	defer s.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			p.mu.Lock()
			armed := p.loseReply != nil && bytes.Contains(chunk, p.loseReply)
			var lost chan struct{}
			if armed {
				p.loseReply, lost = nil, p.lost
			}
			p.mu.Unlock()
			if armed {
				drop.Store(true)
			}
			if _, err := s.Write(chunk); err != nil {
				return
			}
			if armed {
				// Let the server run the command, then cut both sides.
				time.Sleep(300 * time.Millisecond)
				c.Close()
				s.Close()
				close(lost)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) serverToClient(s, c net.Conn, drop *atomic.Bool) {
	defer c.Close()
	r := bufio.NewReader(s)
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if drop.Load() {
			continue
		}
		if hdr[0] == 'Z' {
			p.rfq.Add(1)
		}
		if _, err := c.Write(append(hdr[:], body...)); err != nil {
			return
		}
	}
}
