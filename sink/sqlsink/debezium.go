package sqlsink

import (
	"errors"
	"fmt"

	"github.com/xadb/xa/sink"
)

// Record formats (Config.Format).
const (
	// FormatJSON: each record's value is a JSON document, mapped by the
	// tables' columns (JSONMapping); a null value is a tombstone.
	FormatJSON = "json"
	// FormatDebezium: each record is a Debezium change event
	// (DebeziumMapping).
	FormatDebezium = "debezium"
)

// DebeziumMapping returns the MapFunc of Debezium change events (docs/sink.md,
// "Change data capture"): a record's value is the JSON envelope
// {"before":…, "after":…, "op":…, "source":…, "ts_ms":…}, alone or as the
// "payload" of {"schema":…, "payload":…} (the JSON converter with
// schemas.enable). Every table must be an upsert table. The tables'
// JSON paths ($.id) and "$" read the row image: op c (create), r (read, a
// snapshot) and u (update) upsert the row of "after"; op d (delete)
// deletes by key, the Key columns taken from "before" (each must be
// there). "key", "partition", "position" and "time" are the record's, as
// in JSONMapping. A record whose value is null (the tombstone Debezium
// sends after a delete, for log compaction) is skipped: the delete before
// it has deleted the row. Any other op (t, truncate; m, a message), an
// event without op, or without the image its op needs, is a bad record.
func DebeziumMapping(tables []Table) (MapFunc, error) {
	for _, t := range tables {
		if !t.Upsert {
			return nil, fmt.Errorf("%w: table %s: format %s needs an upsert table (mode upsert, key): a change event updates and deletes by key", sink.ErrConfig, t.id(), FormatDebezium)
		}
	}
	m, err := compileMapping(tables)
	if err != nil {
		return nil, err
	}
	return func(r sink.Record) ([]Row, error) {
		if r.Value == nil {
			return nil, nil
		}
		doc, err := decodeJSON(r.Value)
		if err != nil {
			return nil, err
		}
		ev, ok := doc.(map[string]any)
		if !ok {
			return nil, errors.New("not a Debezium change event: the value is not a JSON object")
		}
		if p, ok := ev["payload"]; ok {
			if _, ok := ev["schema"]; ok {
				if p == nil {
					return nil, nil
				}
				if ev, ok = p.(map[string]any); !ok {
					return nil, errors.New("not a Debezium change event: its payload is not a JSON object")
				}
			}
		}
		op, _ := ev["op"].(string)
		image, del := "after", false
		switch op {
		case "c", "r", "u":
		case "d":
			image, del = "before", true
		case "":
			return nil, errors.New("not a Debezium change event: no op")
		case "t":
			return nil, errors.New("op t (truncate) of a Debezium event: the sink does not apply a truncate")
		default:
			return nil, fmt.Errorf("op %q of a Debezium event: the sink applies c, r, u and d", op)
		}
		row, ok := ev[image].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("op %s of a Debezium event without %q, the row image it needs", op, image)
		}
		return m.rows(&r, row, row, del)
	}, nil
}
