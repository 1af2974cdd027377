//go:build unix

package kafkasource

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xadb/xa/sink"
)

// The child process: a source in group "g" on the brokers in
// $KAFKASOURCE_CHILD, with a plain sink.Handler (no Lost: lost partitions
// go to Revoked), committing the group's offsets after every poll, and
// printing what its handler is told and which records it reads, until its
// standard input closes.

const childEnv = "KAFKASOURCE_CHILD"

func TestMain(m *testing.M) {
	if brokers := os.Getenv(childEnv); brokers != "" {
		os.Exit(runChild(strings.Split(brokers, ",")))
	}
	os.Exit(m.Run())
}

type childHandler struct {
	mu  sync.Mutex
	src *Source
}

func (h *childHandler) say(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fmt.Printf(format+"\n", args...)
}

func (h *childHandler) Assigned(_ context.Context, parts []string) (map[string]string, error) {
	h.say("assigned %s", strings.Join(parts, " "))
	return nil, nil
}

func (h *childHandler) Revoked(_ context.Context, parts []string) error {
	h.say("revoked %s", strings.Join(parts, " "))
	return nil
}

func runChild(brokers []string) int {
	src, err := New(Config{
		Brokers:           brokers,
		Group:             "g",
		Topics:            []string{topic},
		ClientID:          "child",
		SessionTimeout:    time.Second,
		RebalanceTimeout:  2 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		Logf:              func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	h := &childHandler{src: src}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = src.Start(ctx, h)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	stdinClosed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	calls := 0 // the handler's calls so far
	for {
		select {
		case <-stdinClosed:
			src.Close()
			return 0
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		recs, err := src.Poll(ctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "poll:", err)
		}
		if st := src.Stats(); st.Lost+st.Revoked+st.Assigned != calls {
			calls = st.Lost + st.Revoked + st.Assigned
			h.say("stats lost=%d revoked=%d", st.Lost, st.Revoked)
		}
		pos := map[string]string{}
		var order []string
		first := map[string]string{}
		for _, r := range recs {
			if _, ok := first[r.Partition]; !ok {
				first[r.Partition] = r.Next
				order = append(order, r.Partition)
			}
			pos[r.Partition] = r.Next
		}
		for _, p := range order {
			h.say("records %s %s %s", p, first[p], pos[p])
		}
		if len(pos) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := src.Committed(ctx, pos); err != nil {
				fmt.Fprintln(os.Stderr, "committed:", err)
			}
			cancel()
		}
	}
}

// childProc runs the child and collects its output lines.
type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	mu     sync.Mutex
	lines  []string
	done   chan struct{}
}

func startChild(t *testing.T, addrs []string) *childProc {
	t.Helper()
	c := &childProc{done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(addrs, ","))
	c.cmd.Stderr = &c.stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		c.stop()
		if t.Failed() || os.Getenv("KAFKASOURCE_DEBUG") != "" {
			t.Logf("child's output:\n%s\nchild's stderr:\n%s", strings.Join(c.output(0), "\n"), c.stderr.String())
		}
	})
	return c
}

// stop ends the child (it closes its source when its standard input
// closes) and waits for it.
func (c *childProc) stop() {
	c.cmd.Process.Signal(syscall.SIGCONT)
	c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd.Wait()
}

func (c *childProc) output(from int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if from > len(c.lines) {
		return nil
	}
	return slices.Clone(c.lines[from:])
}

func (c *childProc) has(from int, prefix string) bool {
	for _, l := range c.output(from) {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// A process stopped with SIGSTOP (no heartbeats) is thrown out of the group
// after its session timeout; B takes every partition. When the process is
// continued, its handler is told the partitions are gone before it returns
// any record read after that, they count as lost (not merely revoked: the
// handler has no Lost, so they went to Revoked), and it rejoins, getting
// back only partitions B revoked first.
func TestZombieSIGSTOP(t *testing.T) {
	addrs := newCluster(t)
	produce(t, addrs, 20, 0, 1, 2, 3)
	child := startChild(t, addrs)
	waitFor(t, 10*time.Second, "the child owning every partition and reading", func() bool {
		return child.has(0, "assigned "+strings.Join(all4, " ")) && child.has(0, "records ")
	})
	if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	mark := len(child.output(0))

	w := newWorld()
	t.Cleanup(func() {
		if t.Failed() {
			w.dump(t)
		}
	})
	b := startMember(t, w, addrs, "B", "g", memberOpts{})
	b.kafkaCommit = true
	stopB := b.loop()
	waitFor(t, 10*time.Second, "B owning every partition", owns(b, all4...))
	t.Logf("B owned every partition %v after the child stopped", time.Since(stopped))
	produce(t, addrs, 20, 0, 1, 2, 3)
	if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The child prints its stats after the Poll in which its handler was
	// told: wait for them too.
	waitFor(t, 10*time.Second, "the child and B owning 2 each", func() bool {
		out := child.output(mark)
		i := slices.IndexFunc(out, func(l string) bool { return strings.HasPrefix(l, "assigned ") })
		return i >= 0 && slices.ContainsFunc(out[i:], func(l string) bool { return strings.HasPrefix(l, "stats ") }) &&
			len(b.ownedParts()) == 2
	})
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	after := child.output(mark)
	t.Logf("the child after SIGCONT: %q", after)

	// The child is told all four are gone (in one call, or two when kgo
	// kept some across the child's new member ID) before it takes any, and
	// counts them as lost, not revoked.
	var calls []string
	for _, l := range after {
		if strings.HasPrefix(l, "assigned ") || strings.HasPrefix(l, "revoked ") {
			calls = append(calls, l)
		}
	}
	var gone []string
	rest := calls
	for len(rest) > 0 && strings.HasPrefix(rest[0], "revoked ") {
		gone = append(gone, strings.Fields(rest[0])[1:]...)
		rest = rest[1:]
	}
	slices.Sort(gone)
	if !slices.Equal(gone, all4) || len(rest) == 0 {
		t.Fatalf("the child's handler calls after SIGCONT: %q; want %v revoked, then assigned", calls, all4)
	}
	for _, l := range after {
		if strings.HasPrefix(l, "stats ") && (!strings.HasSuffix(l, " revoked=0") || l == "stats lost=0 revoked=0") {
			t.Errorf("the child counted the partitions as revoked, not lost: %q", l)
		}
	}
	// No record of a partition between its loss and its new assignment.
	owned := map[string]bool{}
	told := false
	for _, l := range after {
		f := strings.Fields(l)
		switch f[0] {
		case "revoked":
			told = true
			for _, p := range f[1:] {
				owned[p] = false
			}
		case "assigned":
			for _, p := range f[1:] {
				owned[p] = true
			}
		case "records":
			if told && !owned[f[1]] {
				t.Errorf("the child read %q after it was told the partition was gone", l)
			}
		}
	}
	// A record the child read after SIGCONT, before it was told, is one it
	// could not commit to the group's offsets either.
	if readBefore := !strings.HasPrefix(after[0], "revoked"); readBefore {
		child.stop()
		if !strings.Contains(child.stderr.String(), "committed: kafkasource: committing the group's offsets: partition") {
			t.Errorf("the child read %q after SIGCONT and committed the group's offsets", after[0])
		}
	}
	// What the child got back, B revoked first.
	newParts := strings.Fields(strings.TrimPrefix(rest[0], "assigned "))
	if !slices.Equal(b.ownedParts(), slices.DeleteFunc(slices.Clone(all4), func(p string) bool { return slices.Contains(newParts, p) })) {
		t.Errorf("the child got %v back, B owns %v", newParts, b.ownedParts())
	}
	for _, p := range newParts {
		if w.index(0, "B", "revoked", p) < 0 {
			t.Errorf("%s went back to the child without B's Revoked", p)
		}
	}
	w.checkNoViolations(t)
}

var _ sink.Handler = (*childHandler)(nil)
