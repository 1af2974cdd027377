package sinke2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/kafkasource"
	"github.com/xadb/xa/sink/sqlsink"
)

// The worker is this test binary started as a child process (workerEnv
// holds its spec as JSON): one sink instance reading the Kafka topic in the
// test's consumer group into both databases, until SIGTERM (a clean stop),
// SIGKILL (a crash), or the end of its Run.
//
// Its databases are reached through a proxy of its own (hookProxy), which
// is how the tests put a kill at a precise step of the protocol: a rule
// holds the first packet the sink sends to a target that contains some
// SQL ("XA PREPARE", "COMMIT PREPARED", a write to the rows table...), or
// the reply to it, and prints "HOOK <rule>"; the test then kills the
// process (SIGKILL), stops it (SIGSTOP), or kills a database, and may let
// it go on by writing "go" to its standard input.
//
// It prints one line per event on its standard output, after the time:
//
//	ready pid=<pid>
//	HOOK <rule name>
//	ckpt <id> committed=<bool> records=<n> err=<error>
//	log <slog text line>          (restore's actions, warnings)
//	kafka <source log line>       (assignments, revocations, losses)
//	exit stopped|fenced|error <error>

const workerEnv = "XA_SINKE2E_WORKER"

// workerSpec configures a worker.
type workerSpec struct {
	Sink     string
	Targets  []sqlsink.TargetConfig
	Progress string
	Brokers  []string
	Group    string
	Topic    string

	CheckpointRecords  int
	CheckpointInterval time.Duration
	MaxPending         int
	SweepInterval      time.Duration
	RestoreGrace       time.Duration
	RestoreWait        time.Duration
	MaxPollRecords     int

	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration

	// Rule, if set, holds the protocol at one point (see hookRule).
	Rule *hookRule
	// Delays slow some statements down (widening phase two's window).
	Delays []delayRule
}

// hookRule holds the N-th client packet to Target that contains Match
// (or, with Reply, the server's reply to it) and prints "HOOK <Name>".
// The packet (reply) goes on when the test writes "go" to the worker's
// standard input; with Drop, the connection is closed instead (the reply
// is lost).
type hookRule struct {
	Name   string
	Target string
	Match  string
	Reply  bool
	Drop   bool
	N      int
}

// delayRule delays every client packet to Target containing Match by a
// random time up to Max.
type delayRule struct {
	Target string
	Match  string
	Max    time.Duration
}

// out serialises the worker's output lines.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) say(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// Each line starts with the time, which the test strips (it keeps it
	// for the logs it writes).
	fmt.Fprintf(o.w, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	o.w.Flush()
}

// prefixWriter sends a logger's lines to out, each with a prefix.
type prefixWriter struct {
	o      *out
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		p.o.say("%s %s", p.prefix, l)
	}
	return len(b), nil
}

// observer prints every finished checkpoint.
type observer struct {
	sink.NopObserver
	o *out
}

func (ob observer) CheckpointDone(c sink.CheckpointStats) {
	e := ""
	if c.Err != nil {
		e = strings.ReplaceAll(c.Err.Error(), "\n", " | ")
	}
	ob.o.say("ckpt %d committed=%v records=%d err=%s", c.Checkpoint, c.Committed, c.Records, e)
}

// runWorker is the worker's main; it returns the exit code.
func runWorker(specJSON string) int {
	o := &out{w: bufio.NewWriter(os.Stdout)}
	var spec workerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		o.say("exit error spec: %v", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
	}()

	hp := newHookProxy(o, spec.Rule, spec.Delays)
	// Standard input: "go" lets a held packet on; "freeze" holds every
	// byte to and from Kafka, "thaw" lets them go; its end (the test
	// binary is gone) kills the worker.
	kafka := &gate{}
	kafka.cond = sync.NewCond(&kafka.mu)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch strings.TrimSpace(sc.Text()) {
			case "go":
				hp.release()
			case "freeze":
				kafka.set(true)
				o.say("kafka frozen")
			case "thaw":
				kafka.set(false)
			}
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck
	}()

	cfg := sinkConfig(spec.Sink, spec.Targets, spec.Progress)
	for i, tc := range cfg.Targets {
		dsn, err := hp.route(tc)
		if err != nil {
			o.say("exit error proxy: %v", err)
			return 2
		}
		cfg.Targets[i].DSN = dsn
	}
	cfg.RestoreGrace, cfg.RestoreWait = spec.RestoreGrace, spec.RestoreWait
	cfg.Logger = slog.New(slog.NewTextHandler(prefixWriter{o, "log"}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	s, err := sqlsink.Open(octx, cfg)
	ocancel()
	if err != nil {
		o.say("exit error open: %s", oneLine(err))
		return 1
	}
	defer s.Close()
	src, err := kafkasource.New(kafkasource.Config{
		Brokers:           spec.Brokers,
		Group:             spec.Group,
		Topics:            []string{spec.Topic},
		ClientID:          fmt.Sprintf("w%d", os.Getpid()),
		SessionTimeout:    spec.SessionTimeout,
		RebalanceTimeout:  spec.RebalanceTimeout,
		HeartbeatInterval: spec.HeartbeatInterval,
		MaxPollRecords:    spec.MaxPollRecords,
		Logf:              func(f string, a ...any) { o.say("kafka "+f, a...) },
		Options: []kgo.Opt{kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, host)
			if err != nil {
				return nil, err
			}
			return gatedConn{c, kafka}, nil
		})},
	})
	if err != nil {
		o.say("exit error source: %v", err)
		return 2
	}
	defer src.Close()
	o.say("ready pid=%d", os.Getpid())
	err = s.Run(ctx, src, sink.RunOptions{
		CheckpointRecords:  spec.CheckpointRecords,
		CheckpointInterval: spec.CheckpointInterval,
		MaxPending:         spec.MaxPending,
		MaxAborts:          50,
		SweepInterval:      spec.SweepInterval,
		DrainTimeout:       10 * time.Second,
		Observer:           observer{o: o},
		Logger:             cfg.Logger,
	})
	kafka.set(false) // Close leaves the group
	st := src.Stats()
	switch {
	case ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)):
		o.say("exit stopped (source: assigned=%d revoked=%d lost=%d)", st.Assigned, st.Revoked, st.Lost)
		return 0
	case errors.Is(err, sink.ErrFenced):
		o.say("exit fenced %s (source: assigned=%d revoked=%d lost=%d)", oneLine(err), st.Assigned, st.Revoked, st.Lost)
		return 3
	}
	o.say("exit error %s", oneLine(err))
	return 1
}

// gate holds the worker's Kafka traffic while frozen: a zombie that
// cannot hear from its group, and whose sink goes on.
type gate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
}

func (g *gate) set(frozen bool) {
	g.mu.Lock()
	g.frozen = frozen
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *gate) wait() {
	g.mu.Lock()
	for g.frozen {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

type gatedConn struct {
	net.Conn
	g *gate
}

func (c gatedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.g.wait()
	return n, err
}

func (c gatedConn) Write(b []byte) (int, error) {
	c.g.wait()
	return c.Conn.Write(b)
}

func oneLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	return strings.ReplaceAll(err.Error(), "\n", " | ")
}

// hookProxy forwards the worker's database connections and applies the
// hook rule and the delays.
type hookProxy struct {
	o      *out
	rule   *hookRule
	delays []delayRule
	hits   atomic.Int64
	fired  atomic.Bool
	held   chan struct{} // closed by release
	once   sync.Once
}

func newHookProxy(o *out, rule *hookRule, delays []delayRule) *hookProxy {
	return &hookProxy{o: o, rule: rule, delays: delays, held: make(chan struct{})}
}

func (hp *hookProxy) release() { hp.once.Do(func() { close(hp.held) }) }

// hold prints the hook line and waits for release (or the end).
func (hp *hookProxy) hold() {
	hp.o.say("HOOK %s", hp.rule.Name)
	<-hp.held
}

// route starts a proxy for target tc (when a rule or delay names it) and
// returns the DSN that goes through it.
func (hp *hookProxy) route(tc sqlsink.TargetConfig) (string, error) {
	used := hp.rule != nil && hp.rule.Target == tc.Name
	for _, d := range hp.delays {
		used = used || d.Target == tc.Name
	}
	if !used {
		return tc.DSN, nil
	}
	var addr string
	var rewrite func(proxy string) string
	if tc.Driver == sqlsink.DriverMySQL {
		c, err := mysql.ParseDSN(tc.DSN)
		if err != nil {
			return "", err
		}
		addr = c.Addr
		rewrite = func(proxy string) string { c.Addr = proxy; return c.FormatDSN() }
	} else {
		u, err := url.Parse(tc.DSN)
		if err != nil {
			return "", err
		}
		addr = u.Host
		rewrite = func(proxy string) string { u.Host = proxy; return u.String() }
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go hp.serve(ln, addr, tc.Name)
	return rewrite(ln.Addr().String()), nil
}

func (hp *hookProxy) serve(ln net.Listener, addr, target string) {
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
		var holdReply atomic.Bool
		go hp.clientToServer(c, s, target, &holdReply)
		go hp.serverToClient(s, c, &holdReply)
	}
}

func (hp *hookProxy) clientToServer(c, s net.Conn, target string, holdReply *atomic.Bool) {
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 256<<10)
	var tail []byte
	for {
		n, err := c.Read(buf)
		if n > 0 {
			window := append(tail, buf[:n]...)
			if r := hp.rule; r != nil && r.Target == target && bytes.Contains(window, []byte(r.Match)) &&
				hp.hits.Add(1) == int64(max(r.N, 1)) && !hp.fired.Swap(true) {
				if r.Reply {
					holdReply.Store(true)
				} else {
					hp.hold()
					if r.Drop {
						return
					}
				}
			}
			for _, d := range hp.delays {
				if d.Target == target && bytes.Contains(window, []byte(d.Match)) {
					time.Sleep(rand.N(d.Max + 1))
				}
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
			keep := 64
			if len(window) < keep {
				keep = len(window)
			}
			tail = append(tail[:0:0], window[len(window)-keep:]...)
		}
		if err != nil {
			return
		}
	}
}

func (hp *hookProxy) serverToClient(s, c net.Conn, holdReply *atomic.Bool) {
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 256<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if holdReply.Swap(false) {
				hp.hold()
				if hp.rule.Drop {
					return
				}
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// mapRecord maps a record (value {"id": n, "v": "..."}) to a row of the
// rows table in each target: the key, the partition, the offset and the
// payload.
func mapRecord(r sink.Record) ([]sqlsink.Row, error) {
	var v struct {
		ID int64  `json:"id"`
		V  string `json:"v"`
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return nil, err
	}
	next, err := strconv.ParseInt(r.Next, 10, 64)
	if err != nil {
		return nil, err
	}
	return []sqlsink.Row{
		{Table: "my", Values: []any{v.ID, r.Partition, next - 1, v.V}},
		{Table: "pg", Values: []any{v.ID, r.Partition, next - 1, v.V}},
	}, nil
}

// sinkConfig is the sink's configuration, the same in the workers and in
// the test process (which opens it only to read its status).
func sinkConfig(name string, targets []sqlsink.TargetConfig, progress string) sqlsink.Config {
	cols := []sqlsink.Column{{Name: "k"}, {Name: "p"}, {Name: "koff"}, {Name: "v"}}
	return sqlsink.Config{
		Name:           name,
		Targets:        append([]sqlsink.TargetConfig(nil), targets...),
		Progress:       progress,
		Map:            mapRecord,
		Phase2Attempts: 3,
		Phase2Timeout:  2 * time.Second,
		Tables: []sqlsink.Table{
			{ID: "my", Target: tgMy, Name: rowsTable, Columns: cols},
			{ID: "pg", Target: tgPg, Name: rowsTable, Columns: cols},
		},
	}
}
