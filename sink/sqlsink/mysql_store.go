package sqlsink

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadb/xa/sink"
)

// myStore keeps the bookkeeping tables in MySQL/MariaDB on a database/sql
// pool of its own: multi-statement round trips, arguments interpolated by
// the client, and affected-rows counting matched rows (CLIENT_FOUND_ROWS),
// so that ROW_COUNT() after an UPDATE says how many rows its WHERE matched.
type myStore struct {
	db *sql.DB
}

var myDDL = []string{
	"CREATE TABLE IF NOT EXISTS xa_sink_progress (" +
		"sink VARCHAR(24) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
		"`partition` VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, " +
		"epoch BIGINT NOT NULL, owner BIGINT NOT NULL, " +
		"position TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, " +
		"checkpoint BIGINT NOT NULL, updated DATETIME(6) NOT NULL, " +
		"PRIMARY KEY (sink, `partition`)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS xa_sink_decisions (" +
		"sink VARCHAR(24) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
		"incarnation BIGINT NOT NULL, checkpoint BIGINT NOT NULL, aborted BOOLEAN NOT NULL, " +
		"decided DATETIME(6) NOT NULL, origins TEXT CHARACTER SET ascii NOT NULL, " +
		"PRIMARY KEY (sink, incarnation, checkpoint)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS xa_sink_instances (" +
		"sink VARCHAR(24) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
		"incarnation BIGINT NOT NULL, started DATETIME(6) NOT NULL, " +
		"host VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL, pid INT NOT NULL, " +
		"PRIMARY KEY (sink, incarnation)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS xa_sink_generations (" +
		"sink VARCHAR(24) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
		"generation BIGINT NOT NULL, updated DATETIME(6) NOT NULL, " +
		"PRIMARY KEY (sink)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS " + DeadLetterTable + " (" +
		"sink VARCHAR(24) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
		"incarnation BIGINT NOT NULL, checkpoint BIGINT NOT NULL, seq BIGINT NOT NULL, " +
		"`partition` VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, " +
		"position TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, " +
		"record_key LONGBLOB NULL, record_value LONGBLOB NULL, " +
		"error TEXT CHARACTER SET utf8mb4 NOT NULL, created DATETIME(6) NOT NULL, " +
		"PRIMARY KEY (sink, incarnation, checkpoint, seq)) ENGINE=InnoDB",
}

// myChunkKeys bounds the keys of one lookup statement.
const myChunkKeys = 1000

func openMyStore(ctx context.Context, c TargetConfig) (*myStore, error) {
	cfg, err := gomysql.ParseDSN(c.DSN)
	if err != nil {
		return nil, fmt.Errorf("%w: target %s: DSN: %v", sink.ErrConfig, c.Name, err)
	}
	cfg.MultiStatements = true
	cfg.InterpolateParams = true
	cfg.ClientFoundRows = true
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: target %s: DSN: %v", sink.ErrConfig, c.Name, err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	return &myStore{db: db}, nil
}

func (s *myStore) close() { s.db.Close() }

func (s *myStore) setup(ctx context.Context) error {
	for _, q := range myDDL {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sink: setup: %w", err)
		}
	}
	return nil
}

// allocate: instances starting together deadlock on the range lock, or
// collide on the number; they retry (retryCollisions).
func (s *myStore) allocate(ctx context.Context, sink, host string, pid int) (uint64, error) {
	var inc int64
	err := retryCollisions(ctx, 10, func(err error) bool {
		c := myClass(err)
		return c == classDuplicate || c == classContention
	}, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(incarnation), 0) + 1 FROM xa_sink_instances WHERE sink = ? AND incarnation < ? FOR UPDATE",
			sink, maxSelfIncarnation).Scan(&inc); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO xa_sink_instances (sink, incarnation, started, host, pid) VALUES (?, ?, UTC_TIMESTAMP(6), ?, ?)",
			sink, inc, host, pid); err != nil {
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		return 0, fmt.Errorf("sink: allocating an incarnation: %w", err)
	}
	return uint64(inc), nil
}

// register: see pgStore.register. The fence row is created (from the
// instance rows' highest generation) and locked FOR UPDATE first.
func (s *myStore) register(ctx context.Context, sink string, inc uint64, host string, pid int) error {
	gen := int64(inc & lowWord)
	return retryCollisions(ctx, 5, func(err error) bool { return myClass(err) == classContention }, func() error {
		return s.registerOnce(ctx, sink, inc, gen, host, pid)
	})
}

func (s *myStore) registerOnce(ctx context.Context, sink string, inc uint64, gen int64, host string, pid int) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.ExecContext(ctx, "INSERT INTO xa_sink_generations (sink, generation, updated) "+
		"SELECT ?, COALESCE(MAX(incarnation & ?), 0), UTC_TIMESTAMP(6) FROM xa_sink_instances WHERE sink = ? AND incarnation >= ? "+
		"ON DUPLICATE KEY UPDATE sink = sink", sink, int64(lowWord), sink, maxSelfIncarnation); err != nil {
		return err
	}
	var highest int64
	if err := tx.QueryRowContext(ctx, "SELECT generation FROM xa_sink_generations WHERE sink = ? FOR UPDATE", sink).Scan(&highest); err != nil {
		return err
	}
	if gen < highest {
		return &generationError{reason: errGenerationStale, highest: uint32(highest)}
	}
	res, err := tx.ExecContext(ctx, "INSERT IGNORE INTO xa_sink_instances (sink, incarnation, started, host, pid) VALUES (?, ?, UTC_TIMESTAMP(6), ?, ?)",
		sink, int64(inc), host, pid)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return &generationError{reason: errGenerationReused, highest: uint32(highest)}
	}
	if _, err := tx.ExecContext(ctx, "UPDATE xa_sink_generations SET generation = ?, updated = UTC_TIMESTAMP(6) WHERE sink = ? AND generation < ?",
		gen, sink, gen); err != nil {
		return err
	}
	return tx.Commit()
}

func placeholders(n int, one string) string {
	return strings.TrimSuffix(strings.Repeat(one+",", n), ",")
}

func (s *myStore) take(ctx context.Context, sink string, inc uint64, parts []string) ([]PartitionStatus, error) {
	parts = slices.Sorted(slices.Values(parts)) // one lock order for every taker
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	args := make([]any, 0, 3*len(parts))
	for _, p := range parts {
		args = append(args, sink, p, int64(inc))
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO xa_sink_progress (sink, `partition`, epoch, owner, position, checkpoint, updated) VALUES "+
		placeholders(len(parts), "(?, ?, 1, ?, '', 0, UTC_TIMESTAMP(6))")+
		" ON DUPLICATE KEY UPDATE epoch = epoch + 1, owner = VALUES(owner), updated = VALUES(updated)", args...); err != nil {
		return nil, fmt.Errorf("sink: taking partitions: %w", err)
	}
	out, err := s.readWith(ctx, tx, sink, parts)
	if err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

type myQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *myStore) readWith(ctx context.Context, q myQuerier, sink string, parts []string) ([]PartitionStatus, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	args := []any{sink}
	for _, p := range parts {
		args = append(args, p)
	}
	rows, err := q.QueryContext(ctx, "SELECT `partition`, position, epoch, owner, checkpoint, updated FROM xa_sink_progress WHERE sink = ? AND `partition` IN ("+
		placeholders(len(parts), "?")+") ORDER BY `partition`", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanPartitions(rows)
}

func (s *myStore) read(ctx context.Context, sink string, parts []string) ([]PartitionStatus, error) {
	return s.readWith(ctx, s.db, sink, parts)
}

// decide runs step 3 as one multi-statement round trip:
//
//	START TRANSACTION;
//	UPDATE xa_sink_progress SET position = CASE ..., checkpoint = C ... WHERE sink AND owner AND (partition, epoch) IN (...);
//	INSERT INTO xa_sink_decisions VALUES (S, I, IF(ROW_COUNT() = n, C, NULL), ...);
//	COMMIT
//
// ROW_COUNT() counts the matched rows (CLIENT_FOUND_ROWS), so the INSERT
// fails on NOT NULL (1048) unless every partition matched; the server stops
// at the first failing statement and COMMIT never runs. An external
// member's decision reads the sink's generation fence under a shared lock
// first (LOCK IN SHARE MODE waits for a registration in flight, and reads
// what it committed), inserts the row and moves the progress rows forward;
// if a generation above the committer's is registered, the INSERT fails on
// NOT NULL the same way.
func (s *myStore) decide(ctx context.Context, h Handle, committer uint32) error {
	var sb strings.Builder
	var args []any
	ref := h.Ref("")
	origins := encodeOrigins(h.Branches)
	sb.WriteString("START TRANSACTION; ")
	if !ref.External() {
		if len(h.Partitions) > 0 {
			sb.WriteString("UPDATE xa_sink_progress SET position = CASE `partition`")
			for _, p := range h.Partitions {
				sb.WriteString(" WHEN ? THEN ?")
				args = append(args, p.Partition, p.Position)
			}
			sb.WriteString(" END, checkpoint = ?, updated = UTC_TIMESTAMP(6) WHERE sink = ? AND owner = ? AND (`partition`, epoch) IN (")
			args = append(args, int64(h.Checkpoint), h.Sink, int64(h.Incarnation))
			sb.WriteString(placeholders(len(h.Partitions), "(?, ?)"))
			for _, p := range h.Partitions {
				args = append(args, p.Partition, p.Epoch)
			}
			sb.WriteString("); ")
		}
		sb.WriteString("INSERT INTO xa_sink_decisions (sink, incarnation, checkpoint, aborted, decided, origins) VALUES (?, ?, ")
		args = append(args, h.Sink, int64(h.Incarnation))
		if len(h.Partitions) > 0 {
			sb.WriteString("IF(ROW_COUNT() = ?, ?, NULL)")
			args = append(args, len(h.Partitions), int64(h.Checkpoint))
		} else {
			sb.WriteString("?")
			args = append(args, int64(h.Checkpoint))
		}
		sb.WriteString(", FALSE, UTC_TIMESTAMP(6), ?); COMMIT")
		args = append(args, origins)
	} else {
		sb.WriteString("SELECT MAX(generation) INTO @xa_sink_fence FROM xa_sink_generations WHERE sink = ? LOCK IN SHARE MODE; " +
			"INSERT INTO xa_sink_decisions (sink, incarnation, checkpoint, aborted, decided, origins) VALUES (?, ?, " +
			"IF(@xa_sink_fence <= ?, ?, NULL), FALSE, UTC_TIMESTAMP(6), ?); ")
		args = append(args, h.Sink, h.Sink, int64(h.Incarnation), int64(committer), int64(h.Checkpoint), origins)
		if len(h.Partitions) > 0 {
			sb.WriteString("INSERT INTO xa_sink_progress (sink, `partition`, epoch, owner, position, checkpoint, updated) VALUES ")
			sb.WriteString(placeholders(len(h.Partitions), "(?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))"))
			for _, p := range h.Partitions {
				args = append(args, h.Sink, p.Partition, int64(ref.Generation()), int64(h.Incarnation), p.Position, int64(h.ID))
			}
			// Assignments run left to right on the updated values:
			// the condition's columns (checkpoint, epoch) come last.
			const newer = "(VALUES(epoch) > epoch OR (VALUES(epoch) = epoch AND VALUES(checkpoint) > checkpoint))"
			sb.WriteString(" ON DUPLICATE KEY UPDATE position = IF(" + newer + ", VALUES(position), position), " +
				"owner = IF(" + newer + ", VALUES(owner), owner), updated = IF(" + newer + ", VALUES(updated), updated), " +
				"checkpoint = IF(" + newer + ", VALUES(checkpoint), checkpoint), epoch = GREATEST(epoch, VALUES(epoch)); ")
		}
		sb.WriteString("COMMIT")
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, sb.String(), args...)
	if err != nil {
		// A statement failed (or the reply was lost): the transaction
		// may still be open on the session. Roll it back there, or
		// throw the session away.
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}
	conn.Close()
	if myClass(err) == classNotNull {
		return fmt.Errorf("%w: %v", errEpochMoved, err)
	}
	return err
}

func (s *myStore) claim(ctx context.Context, sink string, k checkpointKey) (stored, error) {
	for range 3 {
		_, err := s.db.ExecContext(ctx, "INSERT INTO xa_sink_decisions (sink, incarnation, checkpoint, aborted, decided, origins) VALUES (?, ?, ?, TRUE, UTC_TIMESTAMP(6), '')",
			sink, int64(k.incarnation), int64(k.checkpoint))
		if err == nil {
			return stored{aborted: true}, nil
		}
		if myClass(err) != classDuplicate {
			return stored{}, err
		}
		var row stored
		err = s.db.QueryRowContext(ctx, "SELECT aborted, origins FROM xa_sink_decisions WHERE sink = ? AND incarnation = ? AND checkpoint = ?",
			sink, int64(k.incarnation), int64(k.checkpoint)).Scan(&row.aborted, &row.origins)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		return row, err
	}
	return stored{}, errors.New("sink: the decision row kept vanishing between the insert and the read")
}

func (s *myStore) lookup(ctx context.Context, sink string, keys []checkpointKey) (map[checkpointKey]stored, error) {
	out := map[checkpointKey]stored{}
	for len(keys) > 0 {
		n := min(len(keys), myChunkKeys)
		args := []any{sink}
		for _, k := range keys[:n] {
			args = append(args, int64(k.incarnation), int64(k.checkpoint))
		}
		rows, err := s.db.QueryContext(ctx, "SELECT incarnation, checkpoint, aborted, origins FROM xa_sink_decisions WHERE sink = ? AND (incarnation, checkpoint) IN ("+
			placeholders(n, "(?, ?)")+")", args...)
		if err != nil {
			return nil, err
		}
		err = scanStored(rows, out)
		rows.Close()
		if err != nil {
			return nil, err
		}
		keys = keys[n:]
	}
	return out, nil
}

func (s *myStore) owners(ctx context.Context, sink string) (map[uint64]bool, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT DISTINCT owner FROM xa_sink_progress WHERE sink = ?", sink)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanOwners(rows)
}

func (s *myStore) forget(ctx context.Context, sink string, age time.Duration, keep []checkpointKey) (int, error) {
	q := "DELETE FROM xa_sink_decisions WHERE sink = ? AND decided < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
	args := []any{sink, age.Microseconds()}
	if len(keep) > 0 {
		q += " AND (incarnation, checkpoint) NOT IN (" + placeholders(len(keep), "(?, ?)") + ")"
		for _, k := range keep {
			args = append(args, int64(k.incarnation), int64(k.checkpoint))
		}
	}
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

func (s *myStore) status(ctx context.Context, sink string) (Status, error) {
	return readStatus(ctx, sink, s.query,
		"SELECT `partition`, position, epoch, owner, checkpoint, updated FROM xa_sink_progress WHERE sink = ? ORDER BY `partition`",
		"SELECT incarnation, started, host, pid FROM xa_sink_instances WHERE sink = ? ORDER BY incarnation")
}

// query runs q for readStatus.
func (s *myStore) query(ctx context.Context, q string, args ...any) (rows, func(), error) {
	rs, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, nil, err
	}
	return rs, func() { rs.Close() }, nil
}

func (s *myStore) tableExists(ctx context.Context, name string) (bool, error) {
	parts := strings.Split(name, ".")
	var schema any
	if len(parts) == 2 {
		schema = parts[0]
	}
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
		schema, parts[len(parts)-1]).Scan(&n)
	return n > 0, err
}

// tableShape reads information_schema.COLUMNS (names, types,
// AUTO_INCREMENT) and STATISTICS: a unique key is an index with
// NON_UNIQUE = 0 whose every part is a whole column (no prefix, SUB_PART;
// no expression, COLUMN_NAME NULL). An upsert matches on any unique key
// (ON DUPLICATE KEY UPDATE).
func (s *myStore) tableShape(ctx context.Context, name string) (tableShape, error) {
	sh := tableShape{foldCase: true, anyUnique: true}
	ok, err := s.tableExists(ctx, name)
	if err != nil || !ok {
		return sh, err
	}
	sh.exists = true
	parts := strings.Split(name, ".")
	var schema any
	if len(parts) == 2 {
		schema = parts[0]
	}
	table := parts[len(parts)-1]
	rows, err := s.db.QueryContext(ctx, "SELECT COLUMN_NAME, LOWER(DATA_TYPE), EXTRA FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
		schema, table)
	if err != nil {
		return sh, err
	}
	for rows.Next() {
		var c, typ, extra string
		if err := rows.Scan(&c, &typ, &extra); err != nil {
			rows.Close()
			return sh, err
		}
		sh.columns = append(sh.columns, c)
		sh.types = append(sh.types, typ)
		if strings.Contains(strings.ToLower(extra), "auto_increment") {
			sh.autoInc = append(sh.autoInc, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return sh, err
	}
	rows, err = s.db.QueryContext(ctx, `SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND NON_UNIQUE = 0 ORDER BY INDEX_NAME, SEQ_IN_INDEX`, schema, table)
	if err != nil {
		return sh, err
	}
	defer rows.Close()
	var order []string
	cols, whole := map[string][]string{}, map[string]bool{}
	for rows.Next() {
		var index string
		var col sql.NullString
		var sub sql.NullInt64
		if err := rows.Scan(&index, &col, &sub); err != nil {
			return sh, err
		}
		if _, seen := whole[index]; !seen {
			order = append(order, index)
			whole[index] = true
		}
		if !col.Valid || sub.Valid {
			whole[index] = false
			continue
		}
		cols[index] = append(cols[index], col.String)
	}
	for _, index := range order {
		if whole[index] {
			sh.uniques = append(sh.uniques, cols[index])
		}
	}
	return sh, rows.Err()
}

// slots: MySQL and MariaDB set no limit on prepared branches.
func (s *myStore) slots(context.Context) (string, int, int, bool, error) { return "", 0, 0, false, nil }

// myBindingsDDL creates xa_sink_bindings (see binding), in every target.
const myBindingsDDL = "CREATE TABLE IF NOT EXISTS xa_sink_bindings (" +
	"sink VARCHAR(24) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
	"target VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
	"target_id CHAR(32) CHARACTER SET ascii NOT NULL, progress_id CHAR(32) CHARACTER SET ascii NOT NULL, " +
	"participant_id VARCHAR(64) CHARACTER SET ascii NOT NULL DEFAULT '', " +
	"target_where TEXT CHARACTER SET utf8mb4 NOT NULL, progress_where TEXT CHARACTER SET utf8mb4 NOT NULL, " +
	"bound DATETIME(6) NOT NULL, PRIMARY KEY (sink, target)) ENGINE=InnoDB"

func (s *myStore) bindings(ctx context.Context, sink string) (map[string]binding, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT target, target_id, progress_id, participant_id, target_where, progress_where, bound "+
		"FROM xa_sink_bindings WHERE sink = ?", sink)
	if myClass(err) == classNoTable {
		return map[string]binding{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanBindings(rows, sink)
}

func (s *myStore) bind(ctx context.Context, b binding) error {
	if _, err := s.db.ExecContext(ctx, myBindingsDDL); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, "INSERT INTO xa_sink_bindings (sink, target, target_id, progress_id, participant_id, target_where, progress_where, bound) "+
		"VALUES (?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "+
		"participant_id = IF(participant_id = '' AND target_id = VALUES(target_id) AND progress_id = VALUES(progress_id), VALUES(participant_id), participant_id)",
		b.sink, b.target, b.targetID, b.progressID, b.participantID, b.where, b.progressWhere)
	return err
}

func (s *myStore) unbind(ctx context.Context, sink, target string) error {
	_, err := s.db.ExecContext(ctx, "DELETE FROM xa_sink_bindings WHERE sink = ? AND target = ?", sink, target)
	return err
}

func (s *myStore) describe(ctx context.Context) (string, error) {
	var where string
	err := s.db.QueryRowContext(ctx, "SELECT CONCAT(IF(VERSION() LIKE '%MariaDB%', 'MariaDB', 'MySQL'), ' database ', COALESCE(DATABASE(), '(none)'), "+
		"' at ', @@hostname, ':', @@port, ', as ', CURRENT_USER())").Scan(&where)
	return where, err
}

func (m *myStore) deadLetters(ctx context.Context, sink string, limit int) ([]DeadLetter, error) {
	q := "SELECT incarnation, checkpoint, seq, `partition`, position, record_key, record_value, error, created FROM " + DeadLetterTable +
		" WHERE sink = ? ORDER BY created, incarnation, checkpoint, seq"
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := m.db.QueryContext(ctx, q, sink)
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
