package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadb/xa/sink"
)

// pgStore keeps the bookkeeping tables in PostgreSQL, on a pool of its
// own (plain sessions, autocommit).
type pgStore struct {
	pool *pgxpool.Pool
}

var pgDDL = []string{
	`CREATE TABLE IF NOT EXISTS xa_sink_progress (
		sink text NOT NULL,
		"partition" text NOT NULL,
		epoch bigint NOT NULL,
		owner bigint NOT NULL,
		position text NOT NULL,
		checkpoint bigint NOT NULL,
		updated timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (sink, "partition"))`,
	`CREATE TABLE IF NOT EXISTS xa_sink_decisions (
		sink text NOT NULL,
		incarnation bigint NOT NULL,
		checkpoint bigint NOT NULL,
		aborted boolean NOT NULL,
		decided timestamptz NOT NULL DEFAULT now(),
		origins text NOT NULL DEFAULT '',
		PRIMARY KEY (sink, incarnation, checkpoint))`,
	`CREATE TABLE IF NOT EXISTS xa_sink_instances (
		sink text NOT NULL,
		incarnation bigint NOT NULL,
		started timestamptz NOT NULL DEFAULT now(),
		host text NOT NULL,
		pid integer NOT NULL,
		PRIMARY KEY (sink, incarnation))`,
	`CREATE TABLE IF NOT EXISTS xa_sink_generations (
		sink text PRIMARY KEY,
		generation bigint NOT NULL,
		updated timestamptz NOT NULL DEFAULT now())`,
	`CREATE TABLE IF NOT EXISTS ` + DeadLetterTable + ` (
		sink text NOT NULL,
		incarnation bigint NOT NULL,
		checkpoint bigint NOT NULL,
		seq bigint NOT NULL,
		"partition" text NOT NULL,
		position text NOT NULL,
		record_key bytea,
		record_value bytea,
		error text NOT NULL,
		created timestamptz NOT NULL,
		PRIMARY KEY (sink, incarnation, checkpoint, seq))`,
}

func openPgStore(ctx context.Context, c TargetConfig) (*pgStore, error) {
	pc, err := pgxpool.ParseConfig(c.DSN)
	if err != nil {
		return nil, fmt.Errorf("%w: target %s: DSN: %v", sink.ErrConfig, c.Name, err)
	}
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("sink: progress target %s: %w", c.Name, err)
	}
	return &pgStore{pool: pool}, nil
}

func (s *pgStore) close() { s.pool.Close() }

// pgDurable makes the transaction it runs in durable at its commit,
// whatever synchronous_commit the role, the database or the session set
// (issue 13): PostgreSQL reads the setting at commit time, and with "off"
// a COMMIT answers before its WAL is flushed, so that a crash of the
// server loses a decision, an abort marker or an epoch that was reported
// stored, and other databases acted on it. It raises "off" and "local"
// to "on" for this transaction only (set_config's is_local), and leaves
// "on", "remote_write" and "remote_apply" as they are.
const pgDurable = `SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_commit') IN ('off', 'local')
	THEN 'on' ELSE current_setting('synchronous_commit') END, true)`

// durable runs a statement that is a decision or a fence (the decision,
// an abort marker, an epoch, an incarnation) behind pgDurable, in one
// pipeline: one round trip, one implicit transaction, committed at its
// Sync. read reads the statement's results; the commit's error, if any,
// is returned too (a lost reply there is an unknown outcome, as for any
// statement).
func (s *pgStore) durable(ctx context.Context, read func(pgx.BatchResults) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(pgDurable)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		err = read(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// execDurable is durable for a statement whose results are not read.
func (s *pgStore) execDurable(ctx context.Context, sql string, args ...any) error {
	return s.durable(ctx, func(br pgx.BatchResults) error {
		_, err := br.Exec()
		return err
	}, sql, args...)
}

// setup creates the tables in one durable transaction (pgDurable: a
// setup reported done survives a crash whatever synchronous_commit says).
func (s *pgStore) setup(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("sink: setup: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	for _, q := range append([]string{pgDurable}, pgDDL...) {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("sink: setup: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sink: setup: %w", err)
	}
	return nil
}

// allocate: instances starting together collide on the next number; they
// retry (retryCollisions).
func (s *pgStore) allocate(ctx context.Context, sink, host string, pid int) (uint64, error) {
	var inc int64
	err := retryCollisions(ctx, 10, func(err error) bool { return pgClass(err) == classDuplicate }, func() error {
		return s.durable(ctx, func(br pgx.BatchResults) error { return br.QueryRow().Scan(&inc) },
			`INSERT INTO xa_sink_instances (sink, incarnation, host, pid)
			SELECT $1, COALESCE(max(incarnation), 0) + 1, $2, $3 FROM xa_sink_instances WHERE sink = $1 AND incarnation < $4
			RETURNING incarnation`, sink, host, pid, maxSelfIncarnation)
	})
	if err != nil {
		return 0, fmt.Errorf("sink: allocating an incarnation: %w", err)
	}
	return uint64(inc), nil
}

// register locks the sink's generation fence row (creating it if
// missing, from the highest generation the instance rows hold, for sinks
// registered before the row existed), refuses a generation below the
// highest, inserts the instance row (refusing one there already) and
// raises the fence, in one transaction.
func (s *pgStore) register(ctx context.Context, sink string, inc uint64, host string, pid int) error {
	gen := int64(inc & lowWord)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, pgDurable); err != nil {
		return err
	}
	var highest int64
	err = tx.QueryRow(ctx, `INSERT INTO xa_sink_generations AS g (sink, generation)
		SELECT $1, COALESCE(max(incarnation & $3), 0) FROM xa_sink_instances WHERE sink = $1 AND incarnation >= $2
		ON CONFLICT (sink) DO UPDATE SET generation = g.generation
		RETURNING generation`, sink, maxSelfIncarnation, int64(lowWord)).Scan(&highest)
	if err != nil {
		return err
	}
	if gen < highest {
		return &generationError{reason: errGenerationStale, highest: uint32(highest)}
	}
	tag, err := tx.Exec(ctx, `INSERT INTO xa_sink_instances (sink, incarnation, host, pid) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
		sink, int64(inc), host, pid)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return &generationError{reason: errGenerationReused, highest: uint32(highest)}
	}
	if _, err := tx.Exec(ctx, `UPDATE xa_sink_generations SET generation = $2, updated = now() WHERE sink = $1 AND generation < $2`, sink, gen); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (s *pgStore) take(ctx context.Context, sink string, inc uint64, parts []string) ([]PartitionStatus, error) {
	parts = slices.Sorted(slices.Values(parts)) // one lock order for every taker
	var out []PartitionStatus
	err := s.durable(ctx, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = scanPartitions(rows)
		return err
	}, `INSERT INTO xa_sink_progress AS p (sink, "partition", epoch, owner, position, checkpoint)
		SELECT $1, part, 1, $2, '', 0 FROM unnest($3::text[]) AS part
		ON CONFLICT (sink, "partition") DO UPDATE SET epoch = p.epoch + 1, owner = excluded.owner, updated = now()
		RETURNING "partition", position, epoch, owner, checkpoint, updated`, sink, int64(inc), parts)
	if err != nil {
		return nil, fmt.Errorf("sink: taking partitions: %w", err)
	}
	return out, nil
}

func (s *pgStore) read(ctx context.Context, sink string, parts []string) ([]PartitionStatus, error) {
	rows, err := s.pool.Query(ctx, `SELECT "partition", position, epoch, owner, checkpoint, updated FROM xa_sink_progress
		WHERE sink = $1 AND "partition" = ANY($2::text[]) ORDER BY "partition"`, sink, parts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanPartitions(rows)
}

func splitParts(ps []PartitionPosition) (names, positions []string, epochs []int64) {
	for _, p := range ps {
		names = append(names, p.Partition)
		positions = append(positions, p.Position)
		epochs = append(epochs, p.Epoch)
	}
	return names, positions, epochs
}

// decide runs step 3 as one statement (one round trip, one transaction,
// durable: see pgDurable):
// the UPDATE of the positions under their epochs feeds the INSERT of the
// decision row, whose checkpoint is NULL, and so violates NOT NULL, unless
// every partition matched. An external member's decision instead inserts
// the row first (its checkpoint NULL if the sink's generation fence, read
// FOR SHARE, is above the committer's generation: the lock waits for a
// registration in flight, and reads the row it committed) and moves the
// progress rows forward.
func (s *pgStore) decide(ctx context.Context, h Handle, committer uint32) error {
	names, positions, epochs := splitParts(h.Partitions)
	ref := h.Ref("")
	var err error
	if !ref.External() {
		err = s.execDurable(ctx, `WITH v AS (SELECT * FROM unnest($3::text[], $4::bigint[], $5::text[]) AS v(part, epoch, position)),
			upd AS (UPDATE xa_sink_progress p SET position = v.position, checkpoint = $6, updated = now() FROM v
				WHERE p.sink = $1 AND p."partition" = v.part AND p.epoch = v.epoch AND p.owner = $2 RETURNING 1)
			INSERT INTO xa_sink_decisions (sink, incarnation, checkpoint, aborted, origins)
			SELECT $1, $2, CASE WHEN count(*) = $7 THEN $6::bigint END, false, $8 FROM upd`,
			h.Sink, int64(h.Incarnation), names, epochs, positions, int64(h.Checkpoint), len(names), encodeOrigins(h.Branches))
		if pgClass(err) == classNotNull {
			return fmt.Errorf("%w: %v", errEpochMoved, err)
		}
		return err
	}
	err = s.execDurable(ctx, `WITH f AS (SELECT generation FROM xa_sink_generations WHERE sink = $1 FOR SHARE),
			d AS (INSERT INTO xa_sink_decisions (sink, incarnation, checkpoint, aborted, origins)
				SELECT $1, $2, CASE WHEN (SELECT generation FROM f) <= $9 THEN $5::bigint END, false, $6
				RETURNING 1),
			v AS (SELECT * FROM unnest($3::text[], $4::text[]) AS v(part, position))
			INSERT INTO xa_sink_progress AS p (sink, "partition", epoch, owner, position, checkpoint)
			SELECT $1, v.part, $7, $2, v.position, $8 FROM v, d
			ON CONFLICT (sink, "partition") DO UPDATE SET position = excluded.position, owner = excluded.owner,
				epoch = excluded.epoch, checkpoint = excluded.checkpoint, updated = now()
			WHERE (excluded.epoch, excluded.checkpoint) > (p.epoch, p.checkpoint)`,
		h.Sink, int64(h.Incarnation), names, positions, int64(h.Checkpoint), encodeOrigins(h.Branches), int64(ref.Generation()), int64(h.ID),
		int64(committer))
	if pgClass(err) == classNotNull {
		return fmt.Errorf("%w: a generation above the committer's (%d) is registered: %v", errEpochMoved, committer, err)
	}
	return err
}

func (s *pgStore) claim(ctx context.Context, sink string, k checkpointKey) (stored, error) {
	for range 3 {
		var inserted bool
		err := s.durable(ctx, func(br pgx.BatchResults) error { return br.QueryRow().Scan(&inserted) },
			`WITH ins AS (INSERT INTO xa_sink_decisions (sink, incarnation, checkpoint, aborted)
			VALUES ($1, $2, $3, true) ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) > 0 FROM ins`,
			sink, int64(k.incarnation), int64(k.checkpoint))
		if err != nil {
			return stored{}, err
		}
		if inserted {
			return stored{aborted: true}, nil
		}
		var row stored
		err = s.pool.QueryRow(ctx, `SELECT aborted, origins FROM xa_sink_decisions WHERE sink = $1 AND incarnation = $2 AND checkpoint = $3`,
			sink, int64(k.incarnation), int64(k.checkpoint)).Scan(&row.aborted, &row.origins)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // forgotten in between: insert again
		}
		return row, err
	}
	return stored{}, errors.New("sink: the decision row kept vanishing between the insert and the read")
}

func (s *pgStore) lookup(ctx context.Context, sink string, keys []checkpointKey) (map[checkpointKey]stored, error) {
	out := map[checkpointKey]stored{}
	if len(keys) == 0 {
		return out, nil
	}
	incs := make([]int64, len(keys))
	txns := make([]int64, len(keys))
	for i, k := range keys {
		incs[i], txns[i] = int64(k.incarnation), int64(k.checkpoint)
	}
	rows, err := s.pool.Query(ctx, `SELECT d.incarnation, d.checkpoint, d.aborted, d.origins FROM xa_sink_decisions d
		JOIN unnest($2::bigint[], $3::bigint[]) AS k(i, c) ON d.incarnation = k.i AND d.checkpoint = k.c WHERE d.sink = $1`,
		sink, incs, txns)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return out, scanStored(rows, out)
}

func (s *pgStore) owners(ctx context.Context, sink string) (map[uint64]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT owner FROM xa_sink_progress WHERE sink = $1`, sink)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanOwners(rows)
}

func (s *pgStore) forget(ctx context.Context, sink string, age time.Duration, keep []checkpointKey) (int, error) {
	incs := make([]int64, len(keep))
	txns := make([]int64, len(keep))
	for i, k := range keep {
		incs[i], txns[i] = int64(k.incarnation), int64(k.checkpoint)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM xa_sink_decisions d WHERE sink = $1
		AND decided < now() - $2::bigint * interval '1 microsecond'
		AND NOT EXISTS (SELECT 1 FROM unnest($3::bigint[], $4::bigint[]) AS k(i, c) WHERE k.i = d.incarnation AND k.c = d.checkpoint)`,
		sink, age.Microseconds(), incs, txns)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

func (s *pgStore) status(ctx context.Context, sink string) (Status, error) {
	return readStatus(ctx, sink, s.query,
		`SELECT "partition", position, epoch, owner, checkpoint, updated FROM xa_sink_progress WHERE sink = $1 ORDER BY "partition"`,
		`SELECT incarnation, started, host, pid FROM xa_sink_instances WHERE sink = $1 ORDER BY incarnation`)
}

// query runs q for readStatus.
func (s *pgStore) query(ctx context.Context, q string, args ...any) (rows, func(), error) {
	rs, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, nil, err
	}
	return rs, rs.Close, nil
}

func (s *pgStore) tableExists(ctx context.Context, name string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier(strings.Split(name, ".")).Sanitize()).Scan(&ok)
	return ok, err
}

// tableShape reads pg_class (what the relation is), pg_attribute (names
// and types; a domain's base type) and pg_index for the table to_regclass
// finds (the search path, as the sink's statements): a unique key is a
// valid, immediate, unique index on columns only (no expression), without
// a predicate, as ON CONFLICT (columns) infers its arbiter.
func (s *pgStore) tableShape(ctx context.Context, name string) (tableShape, error) {
	var sh tableShape
	ident := pgx.Identifier(strings.Split(name, ".")).Sanitize()
	ok, err := s.tableExists(ctx, name)
	if err != nil || !ok {
		return sh, err
	}
	sh.exists = true
	var relkind string
	if err := s.pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, ident).Scan(&relkind); err != nil {
		return sh, err
	}
	switch relkind {
	case "r", "p": // an ordinary or a partitioned table
	case "v":
		sh.relkind = "view"
	case "m":
		sh.relkind = "materialized view"
	case "f":
		sh.relkind = "foreign table"
	case "S":
		sh.relkind = "sequence"
	default:
		sh.relkind = "relation of kind " + relkind
	}
	rows, err := s.pool.Query(ctx, `SELECT a.attname::text, CASE WHEN t.typtype = 'd' THEN b.typname ELSE t.typname END::text
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_type b ON b.oid = t.typbasetype
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, ident)
	if err != nil {
		return sh, err
	}
	for rows.Next() {
		var c, typ string
		if err := rows.Scan(&c, &typ); err != nil {
			rows.Close()
			return sh, err
		}
		sh.columns = append(sh.columns, c)
		sh.types = append(sh.types, typ)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return sh, err
	}
	rows, err = s.pool.Query(ctx, `SELECT i.indexrelid::int8, a.attname::text
		FROM pg_index i
		CROSS JOIN LATERAL generate_series(0, i.indnkeyatts - 1) AS k(n)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k.n]
		WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid AND i.indimmediate
			AND i.indpred IS NULL AND i.indexprs IS NULL
		ORDER BY 1, k.n`, ident)
	if err != nil {
		return sh, err
	}
	defer rows.Close()
	last := int64(-1)
	for rows.Next() {
		var index int64
		var col string
		if err := rows.Scan(&index, &col); err != nil {
			return sh, err
		}
		if index != last {
			sh.uniques = append(sh.uniques, nil)
			last = index
		}
		sh.uniques[len(sh.uniques)-1] = append(sh.uniques[len(sh.uniques)-1], col)
	}
	return sh, rows.Err()
}

func (s *pgStore) slots(ctx context.Context) (server string, max, inUse int, limited bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT coalesce(host(inet_server_addr()), 'local socket') || ':' || current_setting('port'),
		current_setting('max_prepared_transactions')::int, (SELECT count(*) FROM pg_prepared_xacts)::int`).Scan(&server, &max, &inUse)
	return server, max, inUse, err == nil, err
}

// pgBindingsDDL creates xa_sink_bindings (see binding), in every target.
const pgBindingsDDL = `CREATE TABLE IF NOT EXISTS xa_sink_bindings (
	sink text NOT NULL,
	target text NOT NULL,
	target_id text NOT NULL,
	progress_id text NOT NULL,
	participant_id text NOT NULL DEFAULT '',
	target_where text NOT NULL,
	progress_where text NOT NULL,
	bound timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (sink, target))`

func (s *pgStore) bindings(ctx context.Context, sink string) (map[string]binding, error) {
	rows, err := s.pool.Query(ctx, `SELECT target, target_id, progress_id, participant_id, target_where, progress_where, bound
		FROM xa_sink_bindings WHERE sink = $1`, sink)
	if pgClass(err) == classNoTable {
		return map[string]binding{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out, err := scanBindings(rows, sink)
	if pgClass(err) == classNoTable {
		return map[string]binding{}, nil
	}
	return out, err
}

// bind runs in one durable transaction (pgDurable).
func (s *pgStore) bind(ctx context.Context, b binding) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	for _, q := range []string{pgDurable, pgBindingsDDL} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO xa_sink_bindings AS b (sink, target, target_id, progress_id, participant_id, target_where, progress_where)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (sink, target) DO UPDATE SET participant_id = excluded.participant_id
		WHERE b.participant_id = '' AND b.target_id = excluded.target_id AND b.progress_id = excluded.progress_id`,
		b.sink, b.target, b.targetID, b.progressID, b.participantID, b.where, b.progressWhere); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (s *pgStore) unbind(ctx context.Context, sink, target string) error {
	return s.execDurable(ctx, `DELETE FROM xa_sink_bindings WHERE sink = $1 AND target = $2`, sink, target)
}

func (s *pgStore) describe(ctx context.Context) (string, error) {
	var where string
	err := s.pool.QueryRow(ctx, `SELECT 'PostgreSQL database ' || current_database() || ' at ' ||
		coalesce(host(inet_server_addr()), 'local socket') || ':' || current_setting('port') || ', schema ' ||
		coalesce((SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass('xa_sink_bindings')),
			current_schema()::text, '(none)') || ', as role ' || current_user::text`).Scan(&where)
	return where, err
}

func (p *pgStore) deadLetters(ctx context.Context, sink string, limit int) ([]DeadLetter, error) {
	q := `SELECT incarnation, checkpoint, seq, "partition", position, record_key, record_value, error, created FROM ` + DeadLetterTable +
		` WHERE sink = $1 ORDER BY created, incarnation, checkpoint, seq`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := p.pool.Query(ctx, q, sink)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DeadLetter
	for rows.Next() {
		var d DeadLetter
		var inc, ck int64
		if err := rows.Scan(&inc, &ck, &d.Seq, &d.Partition, &d.Position, &d.Key, &d.Value, &d.Error, &d.Created); err != nil {
			return nil, err
		}
		d.Incarnation, d.Checkpoint, d.Created = uint64(inc), uint64(ck), d.Created.UTC()
		out = append(out, d)
	}
	return out, rows.Err()
}
