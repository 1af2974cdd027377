package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/sink/filesource"
	"github.com/xadb/xa/sink/gensource"
	"github.com/xadb/xa/sink/kafkasource"
)

// genConfig is the generator source of a sink's configuration.
func genConfig(src config.SinkSource) gensource.Config {
	return gensource.Config{Records: src.Records, Partitions: src.Partitions, Payload: src.Payload}
}

// openSource returns the sink's configured source; nothing is contacted
// before the sink starts it.
func openSource(sc config.Sink, logger *slog.Logger) (sink.Source, error) {
	src := sc.Source
	switch src.Kind {
	case config.SourceKafka:
		start := kafkasource.StartEarliest
		if src.Start == config.StartCommitted {
			start = kafkasource.StartCommitted
		}
		return kafkasource.New(kafkasource.Config{
			Brokers: src.Brokers, Group: src.Group, Topics: src.Topics, Start: start,
			SessionTimeout:   time.Duration(src.SessionTimeout),
			RebalanceTimeout: time.Duration(src.RebalanceTimeout),
			// No poll returns more than a checkpoint holds: the sink
			// lowers it further before every poll to the room left in
			// its open checkpoint (sink.BoundPolls), so a checkpoint
			// holds at most checkpoint.records records, and the instance
			// that many in memory, whatever the backlog.
			MaxPollRecords: sc.Checkpoint.Records,
			ClientID:       "xactl-sink-" + sc.Name,
			Logf:           func(format string, args ...any) { logger.Debug(fmt.Sprintf(format, args...)) },
		})
	case config.SourceGenerator:
		// Limitable: the sink bounds every poll by the room left in its
		// open checkpoint, as for Kafka.
		return gensource.New(genConfig(src)).Limitable(), nil
	case config.SourceFile:
		fs, err := filesource.New(filesource.Config{Files: src.Paths})
		if err != nil {
			return nil, err
		}
		return fs.Limitable(), nil
	}
	return nil, fmt.Errorf("sink %s: source kind %q", sc.Name, src.Kind) // config.Validate refuses it
}

// partitionEnd is where a partition of a source ends now, and starts.
type partitionEnd struct {
	Partition string
	// Start is the first position (Kafka: the oldest offset still in the
	// log), End the position after the last record (Kafka: the high
	// watermark; a file: its size in bytes).
	Start, End int64
	// Group is the Kafka group's committed offset, -1 if none (or not
	// Kafka).
	Group int64
	// records, when set, counts the records past a position (a file:
	// its positions are byte offsets, not record numbers).
	records func(position string) (int64, error)
}

// lag returns how many records of the partition are past position (""
// is the source's start), and whether it is known.
func (e partitionEnd) lag(position string) (int64, bool) {
	if e.records != nil {
		n, err := e.records(position)
		return n, err == nil
	}
	if position == "" {
		return e.End - e.Start, true
	}
	n, err := strconv.ParseInt(position, 10, 64)
	if err != nil {
		return 0, false
	}
	return max(e.End-n, 0), true
}

// endReader asks a source where its partitions end.
type endReader struct {
	sc    config.Sink
	kafka *kgo.Client
}

func newEndReader(sc config.Sink) (*endReader, error) {
	r := &endReader{sc: sc}
	if sc.Source.Kind == config.SourceKafka {
		cl, err := kgo.NewClient(kgo.SeedBrokers(sc.Source.Brokers...), kgo.ClientID("xactl-sink-"+sc.Name+"-status"))
		if err != nil {
			return nil, fmt.Errorf("kafka: %w", err)
		}
		r.kafka = cl
	}
	return r, nil
}

func (r *endReader) Close() {
	if r.kafka != nil {
		r.kafka.Close()
	}
}

// ends returns every partition of the source with where it ends, sorted.
func (r *endReader) ends(ctx context.Context) ([]partitionEnd, error) {
	src := r.sc.Source
	var out []partitionEnd
	switch src.Kind {
	case config.SourceKafka:
		ps, err := kafkasource.StatusWith(ctx, kadm.NewClient(r.kafka), src.Group, src.Topics...)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			out = append(out, partitionEnd{Partition: p.Partition, Start: max(p.Start, 0), End: p.End, Group: p.Committed})
		}
	case config.SourceGenerator:
		g := genConfig(src)
		for p := range max(g.Partitions, 1) {
			out = append(out, partitionEnd{Partition: g.Partition(p), End: int64(g.Len(p)), Group: -1})
		}
	case config.SourceFile:
		for _, path := range src.Paths {
			fi, err := os.Stat(path)
			if err != nil {
				return nil, err
			}
			out = append(out, partitionEnd{Partition: path, End: fi.Size(), Group: -1,
				records: func(pos string) (int64, error) { return filesource.Remaining(path, pos) }})
		}
	}
	slices.SortFunc(out, func(a, b partitionEnd) int { return comparePartitions(a.Partition, b.Partition) })
	return out, nil
}

// comparePartitions orders "topic/2" before "topic/10".
func comparePartitions(a, b string) int {
	ia, ib := strings.LastIndexByte(a, '/'), strings.LastIndexByte(b, '/')
	if ia >= 0 && ib >= 0 && a[:ia] == b[:ib] {
		na, ea := strconv.Atoi(a[ia+1:])
		nb, eb := strconv.Atoi(b[ib+1:])
		if ea == nil && eb == nil {
			return na - nb
		}
	}
	return strings.Compare(a, b)
}

// sourceText describes a sink's source in a few words.
func sourceText(src config.SinkSource) string {
	switch src.Kind {
	case config.SourceKafka:
		return fmt.Sprintf("kafka (topics %s, group %s, brokers %s)", strings.Join(src.Topics, ", "), src.Group, strings.Join(src.Brokers, ","))
	case config.SourceGenerator:
		g := genConfig(src)
		return fmt.Sprintf("generator (%d records over %d partitions)", g.Records, max(g.Partitions, 1))
	case config.SourceFile:
		return fmt.Sprintf("file (%s)", strings.Join(src.Paths, ", "))
	}
	return src.Kind
}
