package labcli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xadb/xa/internal/lab/stream"
	"github.com/xadb/xa/sink/sqlsink"
)

// The demo sink's checkpoints: small, so that several commit in the
// demo's few seconds.
const (
	demoCheckpointRecords  = 1000
	demoCheckpointInterval = 500 * time.Millisecond
)

// sinkSteps is how many steps the sink part of the demo has.
const sinkSteps = 4

// runSinkDemo is the demo's second part: records from Kafka into both
// databases through the exactly-once sink, the sink killed mid-commit,
// restarted, and the result checked by direct SQL.
func runSinkDemo(ctx context.Context, s *stepper, o demoOpts, x xactl, cfgPath string) error {
	var workers []*sinkWorker
	defer func() {
		// On an early return, no sink process outlives the demo.
		for _, w := range workers {
			if w.cmd.ProcessState == nil {
				w.cmd.Process.Kill() //nolint:errcheck
				w.cmd.Wait()         //nolint:errcheck
			}
		}
	}()

	// 7. Kafka, the tables, the sink's process until its crash point.
	s.step("streaming records from Kafka into both databases with the exactly-once sink")
	kafka, err := stream.StartKafka()
	if err != nil {
		return fmt.Errorf("starting Kafka: %w", err)
	}
	defer kafka.Close()
	brokers := kafka.ListenAddrs()
	if err := stream.Setup(ctx, o.mysqlDSN, o.pgDSN); err != nil {
		return err
	}
	s.say("Kafka (kfake, in this process) on %s: topic %s with %d partitions", strings.Join(brokers, ","), stream.Topic, stream.Partitions)
	s.say("each record becomes a row of table %s in MariaDB and in PostgreSQL; the tables have no unique key on the record,", stream.Table)
	s.say("so a record written twice would be two rows")
	if err := appendSinkConfig(cfgPath, brokers); err != nil {
		return err
	}
	s.say("xactl's configuration now has the sink %s too (sinks: in %s)", stream.SinkName, cfgPath)
	r := x.run(ctx, "table", "sink", "setup", stream.SinkName)
	s.show(r)
	if r.code != 0 {
		return fmt.Errorf("xactl sink setup: %s", r)
	}
	rate := o.sinkRecords / 5 // records/s: produced over about 5 s
	produced := make(chan error, 1)
	pctx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	go func() {
		_, err := stream.Produce(pctx, brokers, 0, o.sinkRecords, max(rate/20, 1), 50*time.Millisecond)
		produced <- err
	}()
	s.say("producing %d records at about %d/s; a checkpoint (one global transaction over both databases) every %d records or %s",
		o.sinkRecords, rate, demoCheckpointRecords, demoCheckpointInterval)
	w, err := startSinkWorker(ctx, o, brokers, fmt.Sprintf("pgcommit:%d", o.sinkCrashAt))
	if err != nil {
		return err
	}
	workers = append(workers, w)
	s.say("sink process %d started (xalab sink-worker); it will be killed with SIGKILL right before checkpoint #%d's PostgreSQL branch is committed:",
		w.cmd.Process.Pid, o.sinkCrashAt)
	s.say("the checkpoint's decision is durable then, and its MariaDB branch committed")
	if err := w.wait(s, true); err != nil {
		return err
	}
	s.ok("the sink died of SIGKILL after %d checkpoints committed (%d records)", w.checkpoints, w.records)

	// 8. What the crash left.
	s.step("what the crash left: a checkpoint committed in one database and prepared in the other")
	st, err := stream.Read(ctx, o.mysqlDSN, o.pgDSN)
	if err != nil {
		return err
	}
	decided, err := decidedCheckpoint(ctx, o)
	if err != nil {
		return err
	}
	s.say("rows in %s: %d in MariaDB, %d in PostgreSQL: checkpoint #%d is in MariaDB only, so far", stream.Table, st.MySQL.Rows, st.Postgres.Rows, decided)
	r = x.run(ctx, "table", "sink", "status", stream.SinkName)
	s.show(r)
	if r.code != 0 {
		return fmt.Errorf("xactl sink status: %s", r)
	}
	s.ok("checkpoint #%d is decided (its decision row moved the positions, in one local transaction) but its PostgreSQL branch is only prepared:\n"+
		"      it holds its rows and locks until the sink's restore commits it; xactl recover leaves sink branches to the sink", decided)

	// 9. The sink again: restore, then reading resumes.
	s.step("restarting the sink: restore finishes what the crash left, reading resumes from the committed positions")
	w, err = startSinkWorker(ctx, o, brokers, "")
	if err != nil {
		return err
	}
	workers = append(workers, w)
	s.say("sink process %d started; taking the partitions over raises their epochs (the dead instance could decide nothing more),", w.cmd.Process.Pid)
	s.say("then its restore resolves the dead instance's prepared branches before it reads a record:")
	done := make(chan error, 1)
	go func() { done <- w.wait(s, false) }()
	var producerDone bool
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case err := <-produced:
			if err != nil {
				return fmt.Errorf("producing: %w", err)
			}
			producerDone = true
		case err := <-done:
			return fmt.Errorf("the sink process ended before it caught up: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if !producerDone {
			continue
		}
		ends, err := stream.EndOffsets(ctx, brokers)
		if err != nil {
			return err
		}
		st, err := stream.Read(ctx, o.mysqlDSN, o.pgDSN)
		if err != nil {
			return err
		}
		if st.Caught(ends) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sink did not catch up with Kafka in 90 s: progress %v, end offsets %v", st.Positions, ends)
		}
	}
	w.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may be gone
	if err := <-done; err != nil {
		return err
	}
	s.ok("every partition's progress reached Kafka's end offset; the sink stopped on SIGTERM after %d more checkpoints", w.checkpoints)

	// 10. Exactly once, by direct SQL.
	s.step("checking exactly-once with direct SQL")
	ends, err := stream.EndOffsets(ctx, brokers)
	if err != nil {
		return err
	}
	st, err = stream.Read(ctx, o.mysqlDSN, o.pgDSN)
	if err != nil {
		return err
	}
	n := o.sinkRecords
	s.say("MariaDB %s: %s: %s", stream.Table, st.MySQL, mark(st.MySQL.Exact(n)))
	s.say("PostgreSQL %s: %s: %s", stream.Table, st.Postgres, mark(st.Postgres.Exact(n)))
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(ends)) {
		parts = append(parts, fmt.Sprintf("%s %s/%d", p, orDash(st.Positions[p]), ends[p]))
	}
	s.say("progress rows / Kafka end offsets: %s: %s", strings.Join(parts, ", "), mark(st.Caught(ends)))
	s.say("prepared transactions left: %d in MariaDB, %d in PostgreSQL: %s", st.MySQLPrepared, st.PostgresPrepared, mark(st.MySQLPrepared+st.PostgresPrepared == 0))
	if err := st.Check(n, ends); err != nil {
		return &exitError{code: ExitError, err: err}
	}
	return nil
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAILED"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// decidedCheckpoint returns the checkpoint of the sink's prepared
// branch that is decided commit, as the sink's own status reads it; an
// error if there is none (the crash point did not leave what the demo
// shows).
func decidedCheckpoint(ctx context.Context, o demoOpts) (uint64, error) {
	sk, err := sqlsink.Open(ctx, stream.Config(o.mysqlDSN, o.pgDSN))
	if err != nil {
		return 0, err
	}
	defer sk.Close()
	st, err := sk.Status(ctx)
	if err != nil {
		return 0, err
	}
	for _, br := range st.Branches {
		if br.Decision == sqlsink.DecidedCommit {
			return br.Ref.Checkpoint, nil
		}
	}
	return 0, errors.New("the crash left no decided branch prepared: the demo did not show what it should")
}

// appendSinkConfig adds the demo's sink to xactl's configuration file, as
// an operator would: xactl sink setup and status then work on it.
func appendSinkConfig(path string, brokers []string) error {
	b, _ := json.Marshal(brokers)
	text := fmt.Sprintf(`sinks:
  - name: %s
    source:
      kind: kafka
      brokers: %s
      group: %s
      topics: [%s]
    targets: [%s, %s]
    progress: %s
    tables:
      - target: %s
        name: %s
        columns: {id: $.id, part: partition, amount: $.amount}
      - target: %s
        name: %s
        columns: {id: $.id, part: partition, amount: $.amount}
    checkpoint:
      records: %d
      interval: %s
    restore_grace: %s
`, stream.SinkName, b, stream.Group, stream.Topic, stream.MySQLTarget, stream.PostgresTarget, stream.Progress,
		stream.MySQLTarget, stream.Table, stream.PostgresTarget, stream.Table,
		demoCheckpointRecords, demoCheckpointInterval, stream.Config("", "").RestoreGrace)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sinkWorker is a running xalab sink-worker and what it reported.
type sinkWorker struct {
	cmd         *exec.Cmd
	lines       *bufio.Scanner
	stderr      *strings.Builder
	checkpoints int
	records     int
}

func startSinkWorker(ctx context.Context, o demoOpts, brokers []string, crash string) (*sinkWorker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"sink-worker", "--mysql-dsn", o.mysqlDSN, "--postgres-dsn", o.pgDSN, "--brokers", strings.Join(brokers, ","),
		"--checkpoint-records", strconv.Itoa(demoCheckpointRecords), "--checkpoint-interval", demoCheckpointInterval.String()}
	if crash != "" {
		args = append(args, "--crash", crash)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w := &sinkWorker{cmd: cmd, lines: bufio.NewScanner(out), stderr: &strings.Builder{}}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return w, nil
}

// wait reads the worker's lines until it exits, showing what restore
// did and a status line; killed says it must die of SIGKILL (its crash
// point), else exit 0.
func (w *sinkWorker) wait(s *stepper, killed bool) error {
	last := time.Time{}
	for w.lines.Scan() {
		kind, rest, _ := strings.Cut(w.lines.Text(), " ")
		switch kind {
		case "checkpoint":
			f := strings.Fields(rest)
			if len(f) >= 3 && f[1] == "committed" {
				n, _ := strconv.Atoi(f[2])
				w.checkpoints++
				w.records += n
			} else if len(f) >= 2 {
				s.say("checkpoint %s aborted: %s", f[0], strings.Join(f[min(3, len(f)):], " "))
			}
		case "restore":
			s.say("restore: %s", rest)
		}
		if time.Since(last) > 100*time.Millisecond {
			s.status("checkpoints committed %d, records %d", w.checkpoints, w.records)
			last = time.Now()
		}
	}
	s.clear()
	err := w.cmd.Wait()
	if killed {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			return fmt.Errorf("the sink process should have died of SIGKILL at its crash point, got %v\n%s", err, w.stderr)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("the sink process: %v\n%s", err, w.stderr)
	}
	return nil
}
