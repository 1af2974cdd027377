package sqlsink

import (
	"context"
	"fmt"
)

// Setup creates the sink's tables (xa_sink_progress, xa_sink_decisions,
// xa_sink_instances, xa_sink_generations) in the progress target if they
// are missing. It is idempotent; run it once before the first instance
// (xactl sink setup), and again after an upgrade that adds a table.
func Setup(ctx context.Context, progress TargetConfig) error {
	return withStore(ctx, progress, func(st store) error { return st.setup(ctx) })
}

// Tables lists the bookkeeping tables Setup creates.
func Tables() []string {
	return []string{"xa_sink_progress", "xa_sink_decisions", "xa_sink_instances", "xa_sink_generations"}
}

// TablesExist reports, for each of names ("table" or "schema.table"),
// whether target t holds it, as the sink's statements would find it.
func TablesExist(ctx context.Context, t TargetConfig, names []string) (map[string]bool, error) {
	out := make(map[string]bool, len(names))
	err := withStore(ctx, t, func(st store) error {
		for _, n := range names {
			ok, err := st.tableExists(ctx, n)
			if err != nil {
				return fmt.Errorf("sink: target %s: looking for table %s: %w", t.Name, n, err)
			}
			out[n] = ok
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PreparedSlots reports how many prepared transactions target t's server
// may hold at once and holds now, where its kind sets a limit
// (PostgreSQL's max_prepared_transactions, shared by every database of the
// server, which server names); limited is false for kinds without one
// (MySQL, MariaDB).
func PreparedSlots(ctx context.Context, t TargetConfig) (server string, max, inUse int, limited bool, err error) {
	err = withStore(ctx, t, func(st store) error {
		server, max, inUse, limited, err = st.slots(ctx)
		return err
	})
	return server, max, inUse, limited, err
}
