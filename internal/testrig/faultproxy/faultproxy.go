// Package faultproxy is a TCP proxy on loopback for fault injection against
// real database servers: it forwards bytes both ways and, when armed, cuts
// a connection at a chosen moment — for example after the client sent a
// command containing "XA COMMIT" and before the server's reply reaches the
// client, which is exactly the lost reply a transaction manager must treat
// as "outcome unknown".
package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from its own address to a target.
type Proxy struct {
	ln     net.Listener
	target string
	// parted: a partition is in force (Partition, PartitionBefore): new
	// connections are closed at once, until Heal.
	parted atomic.Bool

	mu    sync.Mutex
	rules []*Rule
	conns map[*pair]struct{}
	wg    sync.WaitGroup
}

// Rule cuts the first connection whose client sends a packet containing
// Match: the packet is delivered to the server and the connection is then
// closed on both sides before any reply is forwarded.
type Rule struct {
	Match []byte
	// partition: the packet is not delivered, and the proxy partitions
	// (PartitionBefore).
	partition bool
	fired     atomic.Bool
	done      chan struct{}
}

// Fired reports whether the rule has cut a connection.
func (r *Rule) Fired() bool { return r.fired.Load() }

// Done is closed when the rule fires.
func (r *Rule) Done() <-chan struct{} { return r.done }

type pair struct {
	client, server net.Conn
	cut            atomic.Bool   // a rule fired: replies are swallowed
	replied        chan struct{} // closed when the server replied after the cut
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// CutAfter arms a rule: the next client packet containing match goes to the
// server, and then its connection is cut before the reply comes back.
func (p *Proxy) CutAfter(match string) *Rule {
	r := &Rule{Match: []byte(match), done: make(chan struct{})}
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
	return r
}

// PartitionBefore arms a rule: the next client packet containing match is
// not delivered; its connection and every other is cut, and the proxy
// refuses new connections until Heal — the network partition that strikes
// right before a command reaches the server (phase 2 of a branch whose
// prepare got through).
func (p *Proxy) PartitionBefore(match string) *Rule {
	r := &Rule{Match: []byte(match), partition: true, done: make(chan struct{})}
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
	return r
}

// Partition cuts every connection and refuses new ones until Heal.
func (p *Proxy) Partition() {
	p.parted.Store(true)
	p.CutAll()
}

// Heal ends a partition: new connections are forwarded again.
func (p *Proxy) Heal() { p.parted.Store(false) }

// CutAll closes every open connection now (a network partition).
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.client.Close()
		c.server.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.parted.Load() {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pr := &pair{client: c, server: s, replied: make(chan struct{})}
		p.mu.Lock()
		p.conns[pr] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.clientToServer(pr)
		go p.serverToClient(pr)
	}
}

func (p *Proxy) drop(pr *pair) {
	pr.client.Close()
	pr.server.Close()
	p.mu.Lock()
	delete(p.conns, pr)
	p.mu.Unlock()
}

func (p *Proxy) match(b []byte) *Rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.rules {
		if bytes.Contains(b, r.Match) {
			p.rules = append(p.rules[:i], p.rules[i+1:]...)
			return r
		}
	}
	return nil
}

func (p *Proxy) clientToServer(pr *pair) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := pr.client.Read(buf)
		if n > 0 {
			r := p.match(buf[:n])
			if r != nil && r.partition {
				p.Partition()
				r.fired.Store(true)
				close(r.done)
				return
			}
			if r != nil {
				// Swallow replies from now on, deliver the command, wait
				// until the server has answered (so it acted on it), cut.
				pr.cut.Store(true)
			}
			if _, werr := pr.server.Write(buf[:n]); werr != nil {
				p.drop(pr)
				return
			}
			if r != nil {
				select {
				case <-pr.replied:
				case <-time.After(10 * time.Second):
				}
				p.drop(pr)
				r.fired.Store(true)
				close(r.done)
				return
			}
		}
		if err != nil {
			p.drop(pr)
			return
		}
	}
}

func (p *Proxy) serverToClient(pr *pair) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := pr.server.Read(buf)
		if n > 0 && pr.cut.Load() {
			close(pr.replied)
			return
		}
		if n > 0 {
			if _, werr := pr.client.Write(buf[:n]); werr != nil {
				p.drop(pr)
				return
			}
		}
		if err != nil {
			p.drop(pr)
			return
		}
	}
}
