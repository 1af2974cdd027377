package crashpoint

import (
	"bytes"
	"io"
	"net"
	"sync"
)

// PGCommit is what the "pgcommit" point matches in PostgreSQL's wire
// protocol: the text of a COMMIT PREPARED statement.
var PGCommit = []byte("COMMIT PREPARED ")

// Proxy forwards TCP connections from a loopback port to addr (a
// database server), and passes point (Hit) right before it forwards data
// from a client that contains match, once per occurrence: when the
// trigger is set for that point, the process dies there and the server
// never sees the message. It returns the proxy's address (host:port) and
// a function that stops it.
func (t *Trigger) Proxy(addr, point string, match []byte) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			track(c, true)
			track(s, true)
			go func() {
				t.forward(s, c, point, match)
				c.Close()
				s.Close()
				track(c, false)
				track(s, false)
			}()
			go func() {
				io.Copy(c, s) //nolint:errcheck // ends with either side
				c.Close()
				s.Close()
			}()
		}
	}()
	stop := func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
			c.Close()
		}
	}
	return ln.Addr().String(), stop, nil
}

// forward copies from the client c to the server s, passing point before
// each chunk that holds match. A match split between two reads is found:
// the end of the previous read is searched with the next.
func (t *Trigger) forward(s, c net.Conn, point string, match []byte) {
	buf := make([]byte, 64<<10)
	var tail []byte
	for {
		n, err := c.Read(buf)
		if n > 0 {
			window := append(tail, buf[:n]...)
			for k := bytes.Count(window, match); k > 0; k-- {
				t.Hit(point)
			}
			keep := min(len(window), len(match)-1)
			tail = append(tail[:0], window[len(window)-keep:]...)
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
