package faultproxy

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// An upper-casing line server stands in for a database: the proxy must
// forward normally, then deliver the matching command, swallow its reply
// and cut.
func TestCutAfterMatch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- strings.TrimSpace(line)
					c.Write([]byte(strings.ToUpper(line))) //nolint:errcheck
				}
			}(c)
		}
	}()
	p, err := Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	c.Write([]byte("hello\n")) //nolint:errcheck
	if line, _ := r.ReadString('\n'); line != "HELLO\n" {
		t.Fatalf("forwarded reply %q", line)
	}
	rule := p.CutAfter("commit")
	c.Write([]byte("xa commit 1\n")) //nolint:errcheck
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("reply %q got through a cut", line)
	}
	<-rule.Done()
	if <-got != "hello" || <-got != "xa commit 1" {
		t.Fatal("the server did not receive both commands")
	}
}
