// Package stream is the demo's exactly-once sink workload: a Kafka topic
// (an in-process kfake cluster, hosted by the demo), records produced into
// it, the tables they land in on MariaDB and PostgreSQL, the sink's
// process (RunWorker, run by the hidden `xalab sink-worker`, which can kill
// itself at a crash point), and the checks by direct SQL.
//
// A record is {"id":<n>,"amount":<n%100+1>}, keyed by its id, in
// partition n%Partitions. Each database's table events has a surrogate key
// and no unique constraint on the record: a record written twice would be
// two rows, and the checks would see it.
package stream

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadb/xa/internal/lab/bank"
	"github.com/xadb/xa/sink"
)

// The demo's names.
const (
	Topic      = "events"
	Partitions = 4
	Group      = "xalab-demo-sink"
	SinkName   = "demo"
	Table      = "events"
	// The targets are the demo's participants (xactl's configuration
	// names them so): a sink branch's qualifier is its target's name.
	MySQLTarget    = bank.MySQLName
	PostgresTarget = bank.PostgresName
	// Progress is the target holding the sink's bookkeeping.
	Progress = PostgresTarget
)

// StartKafka starts an in-process Kafka cluster with the topic; its
// brokers are c.ListenAddrs(). Group members may use session timeouts
// down to 100 ms, so that a killed sink's membership ends quickly.
func StartKafka() (*kfake.Cluster, error) {
	return kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(Partitions, Topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
}

// Amount is record id's amount.
func Amount(id int) int64 { return int64(id%100 + 1) }

// Produce writes records from, from+1, ..., to-1 into the topic, in
// batches of batch every interval (0: as fast as Kafka takes them), and
// returns how many it wrote.
func Produce(ctx context.Context, brokers []string, from, to, batch int, interval time.Duration) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	done := 0
	for id := from; id < to; {
		var recs []*kgo.Record
		for ; id < to && len(recs) < max(batch, 1); id++ {
			v, _ := json.Marshal(map[string]int64{"id": int64(id), "amount": Amount(id)})
			recs = append(recs, &kgo.Record{Key: []byte(strconv.Itoa(id)), Value: v, Partition: int32(id % Partitions)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return done, err
		}
		done += len(recs)
		if interval > 0 && id < to {
			select {
			case <-ctx.Done():
				return done, ctx.Err()
			case <-time.After(interval):
			}
		}
	}
	return done, nil
}

// EndOffsets returns Kafka's end offset of every partition of the topic,
// by partition name ("events/0"): where a reader that read everything
// resumes.
func EndOffsets(ctx context.Context, brokers []string) (map[string]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, Topic)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var errs []error
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, o.Err)
			return
		}
		out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
	})
	if len(out) != Partitions {
		errs = append(errs, fmt.Errorf("stream: %d partitions listed, want %d", len(out), Partitions))
	}
	return out, errors.Join(errs...)
}

// Targets returns the sink's targets.
func Targets(mysqlDSN, pgDSN string) []sink.TargetConfig {
	return []sink.TargetConfig{
		{Name: MySQLTarget, Driver: sink.DriverMySQL, DSN: mysqlDSN, Init: true},
		{Name: PostgresTarget, Driver: sink.DriverPostgres, DSN: pgDSN, Init: true},
	}
}

// ProgressTarget returns the target holding the bookkeeping.
func ProgressTarget(mysqlDSN, pgDSN string) sink.TargetConfig {
	for _, t := range Targets(mysqlDSN, pgDSN) {
		if t.Name == Progress {
			return t
		}
	}
	panic("stream: no progress target")
}

// columns map a record to a row of events.
var columns = []sink.Column{{Name: "id", From: "$.id"}, {Name: "part", From: "partition"}, {Name: "amount", From: "$.amount"}}

// Config returns the sink's configuration.
func Config(mysqlDSN, pgDSN string) sink.Config {
	return sink.Config{
		Name:     SinkName,
		Targets:  Targets(mysqlDSN, pgDSN),
		Progress: Progress,
		Tables: []sink.Table{
			{ID: "mysql.events", Target: MySQLTarget, Name: Table, Columns: columns},
			{ID: "postgres.events", Target: PostgresTarget, Name: Table, Columns: columns},
		},
		// A few checkpoint intervals: an undecided branch of a live
		// instance older than this is fenced.
		RestoreGrace: 5 * time.Second,
	}
}

// Setup (re)creates the tables events in both databases and the sink's
// bookkeeping tables in the progress target, and forgets the sink's
// earlier progress there.
func Setup(ctx context.Context, mysqlDSN, pgDSN string) error {
	my, err := openMySQL(mysqlDSN)
	if err != nil {
		return err
	}
	defer my.Close()
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + Table,
		"CREATE TABLE " + Table + " (row_id BIGINT AUTO_INCREMENT PRIMARY KEY, id BIGINT NOT NULL, part VARCHAR(64) NOT NULL, amount BIGINT NOT NULL) ENGINE=InnoDB",
	} {
		if _, err := my.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("mysql: %w", err)
		}
	}
	pg, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		return err
	}
	defer pg.Close(ctx)
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + Table,
		"CREATE TABLE " + Table + " (row_id bigserial PRIMARY KEY, id bigint NOT NULL, part text NOT NULL, amount bigint NOT NULL)",
	} {
		if _, err := pg.Exec(ctx, q); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	if err := sink.Setup(ctx, ProgressTarget(mysqlDSN, pgDSN)); err != nil {
		return err
	}
	for _, q := range []string{"xa_sink_progress", "xa_sink_decisions", "xa_sink_instances", "xa_sink_generations"} {
		if _, err := pg.Exec(ctx, "DELETE FROM "+q+" WHERE sink = $1", SinkName); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	// Bind the targets to the progress store (xactl sink setup does it).
	s, err := sink.Open(ctx, Config(mysqlDSN, pgDSN))
	if err != nil {
		return err
	}
	defer s.Close()
	_, err = s.Bind(ctx)
	return err
}

func openMySQL(dsn string) (*sql.DB, error) {
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	return sql.Open("mysql", c.FormatDSN())
}

// Tally is what a database's table events holds.
type Tally struct {
	Rows, Distinct int64 // rows, distinct record ids
	Min, Max       int64 // smallest and largest id (-1: none)
	Amount         int64 // the sum of the amounts
}

// Exact reports whether t holds records 0 to n-1, each once.
func (t Tally) Exact(n int) bool {
	return t.Rows == int64(n) && t.Distinct == int64(n) && t.Min == 0 && t.Max == int64(n-1) && t.Amount == SumAmounts(n)
}

func (t Tally) String() string {
	return fmt.Sprintf("%d rows, %d distinct records (ids %d to %d), amounts summing to %d", t.Rows, t.Distinct, t.Min, t.Max, t.Amount)
}

// SumAmounts is the sum of the amounts of records 0 to n-1.
func SumAmounts(n int) int64 {
	var s int64
	for id := range n {
		s += Amount(id)
	}
	return s
}

const tallySQL = "SELECT COUNT(*), COUNT(DISTINCT id), COALESCE(MIN(id), -1), COALESCE(MAX(id), -1), COALESCE(SUM(amount), 0) FROM " + Table

// State is what the databases hold, read by direct SQL.
type State struct {
	MySQL, Postgres Tally
	// Prepared counts the prepared transactions left in each database.
	MySQLPrepared, PostgresPrepared int
	// Positions are the sink's progress rows: where each partition
	// resumes (the next offset).
	Positions map[string]string
}

// Read reads the tables, the prepared transactions and the progress rows.
func Read(ctx context.Context, mysqlDSN, pgDSN string) (State, error) {
	var s State
	my, err := openMySQL(mysqlDSN)
	if err != nil {
		return s, err
	}
	defer my.Close()
	t := &s.MySQL
	if err := my.QueryRowContext(ctx, tallySQL).Scan(&t.Rows, &t.Distinct, &t.Min, &t.Max, &t.Amount); err != nil {
		return s, fmt.Errorf("mysql: %w", err)
	}
	rows, err := my.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return s, fmt.Errorf("mysql: %w", err)
	}
	for rows.Next() {
		s.MySQLPrepared++
	}
	rows.Close()
	pg, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		return s, err
	}
	defer pg.Close(ctx)
	t = &s.Postgres
	if err := pg.QueryRow(ctx, tallySQL).Scan(&t.Rows, &t.Distinct, &t.Min, &t.Max, &t.Amount); err != nil {
		return s, fmt.Errorf("postgres: %w", err)
	}
	if err := pg.QueryRow(ctx, "SELECT COUNT(*) FROM pg_prepared_xacts WHERE database = current_database()").Scan(&s.PostgresPrepared); err != nil {
		return s, fmt.Errorf("postgres: %w", err)
	}
	st, err := sink.ReadStatus(ctx, ProgressTarget(mysqlDSN, pgDSN), SinkName)
	if err != nil {
		return s, err
	}
	s.Positions = map[string]string{}
	for _, p := range st.Partitions {
		s.Positions[p.Partition] = p.Position
	}
	return s, nil
}

// Caught reports whether every partition's progress is at its end offset.
func (s State) Caught(ends map[string]int64) bool {
	for p, end := range ends {
		if s.Positions[p] != strconv.FormatInt(end, 10) && !(end == 0 && s.Positions[p] == "") {
			return false
		}
	}
	return true
}

// Check verifies that both databases hold records 0 to n-1 exactly once,
// that the progress rows equal the Kafka end offsets, and that nothing is
// left prepared.
func (s State) Check(n int, ends map[string]int64) error {
	var errs []error
	if !s.MySQL.Exact(n) {
		errs = append(errs, fmt.Errorf("MariaDB holds %s; want %d rows, each record once, summing to %d", s.MySQL, n, SumAmounts(n)))
	}
	if !s.Postgres.Exact(n) {
		errs = append(errs, fmt.Errorf("PostgreSQL holds %s; want %d rows, each record once, summing to %d", s.Postgres, n, SumAmounts(n)))
	}
	if !s.Caught(ends) {
		errs = append(errs, fmt.Errorf("the progress rows %v are not the Kafka end offsets %v", s.Positions, ends))
	}
	if s.MySQLPrepared+s.PostgresPrepared > 0 {
		errs = append(errs, fmt.Errorf("prepared transactions left: %d in MariaDB, %d in PostgreSQL", s.MySQLPrepared, s.PostgresPrepared))
	}
	return errors.Join(errs...)
}
