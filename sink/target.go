package sink

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/drivers"
	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/xa"
)

// Drivers of a target: the names of the participant kinds in the driver
// registry (package drivers) that the sink can write to; their aliases
// ("mariadb", "postgresql") are accepted too.
const (
	DriverMySQL    = "mysql"    // MySQL 8 and MariaDB (drivers/mysql)
	DriverPostgres = "postgres" // PostgreSQL (drivers/postgres)
)

// TargetConfig is one participant database the sink writes to.
type TargetConfig struct {
	// Name is the participant's name: the branch qualifier of its XIDs,
	// stable across restarts (see ValidateTarget).
	Name string
	// Driver is the participant kind: DriverMySQL or DriverPostgres, or
	// an alias the driver registry knows.
	Driver string
	// DSN is the driver's DSN (go-sql-driver/mysql or pgx).
	DSN string
	// MaxConns bounds the participant's pool (default 8). Each
	// checkpoint in flight holds one session until it is prepared
	// (MySQL: until it is committed).
	MaxConns int
	// BatchBytes bounds one MySQL multi-row INSERT (default 1 MiB; keep
	// it well below the server's max_allowed_packet) and one PostgreSQL
	// COPY or batched INSERT; a table's buffer is flushed when it holds
	// this much.
	BatchBytes int
	// BatchRows bounds the rows of one flush (default 5000).
	BatchRows int
	// Init creates the participant's identity in its database when it is
	// missing (drivers.Options.Init): the explicit act of setting a target
	// up, which xactl sink setup and xactl participant init do. Without it
	// a target whose database has no identity is refused.
	Init bool
}

const (
	defaultBatchBytes = 1 << 20
	defaultBatchRows  = 5000
	// maxPlaceholders bounds the arguments of one statement (both
	// servers refuse more than 65535 in a prepared statement).
	maxPlaceholders = 60000
	// pgUpsertChunk is the row count of PostgreSQL's batched upserts;
	// remainders go in power-of-two chunks so that few distinct
	// statements are prepared.
	pgUpsertChunk = 256
)

// target is an open participant.
type target struct {
	cfg   TargetConfig
	rm    xa.ResourceManager
	close func()
}

func (c TargetConfig) withDefaults() TargetConfig {
	if c.MaxConns <= 0 {
		c.MaxConns = 8
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = defaultBatchBytes
	}
	if c.BatchRows <= 0 {
		c.BatchRows = defaultBatchRows
	}
	return c
}

func (c TargetConfig) validate() error {
	if err := ValidateTarget(c.Name); err != nil {
		return err
	}
	switch c.kind() {
	case DriverMySQL, DriverPostgres:
	default:
		return fmt.Errorf("%w: target %s: driver %q: the sink writes to %q and %q", ErrConfig, c.Name, c.Driver, DriverMySQL, DriverPostgres)
	}
	if c.DSN == "" {
		return fmt.Errorf("%w: target %s: no DSN", ErrConfig, c.Name)
	}
	return nil
}

// kind returns the registry's name of the target's driver, "" if the
// registry does not know it.
func (c TargetConfig) kind() string {
	k, ok := drivers.Lookup(c.Driver)
	if !ok {
		return ""
	}
	return k.Name
}

// openTarget opens the participant through the driver registry.
func openTarget(ctx context.Context, c TargetConfig, log *slog.Logger) (*target, error) {
	c = c.withDefaults()
	c.Driver = c.kind()
	p, err := drivers.Open(ctx, c.Driver, drivers.Options{Name: c.Name, DSN: c.DSN, MaxConns: c.MaxConns, Logger: log, Init: c.Init})
	if err != nil {
		return nil, err
	}
	return &target{cfg: c, rm: p, close: func() { p.Close() }}, nil
}

// table is a Table compiled for its target's dialect.
type table struct {
	Table
	t      *target
	keyIdx []int
	// kinds are the kinds of Columns in the target's catalogue, recorded
	// by the table check that every instance runs first (nil before).
	kinds atomic.Pointer[[]colKind]
	// MySQL: "INSERT INTO `t` (`a`,`b`) VALUES ", "(?,?)", and the
	// upsert clause.
	myPrefix, myRow, mySuffix string
	// PostgreSQL: the COPY target and the upsert statement's parts.
	pgIdent            pgx.Identifier
	pgPrefix, pgSuffix string
}

func compileTable(tb Table, t *target) *table {
	ct := &table{Table: tb, t: t}
	for _, k := range tb.Key {
		for i, c := range tb.Columns {
			if c.Name == k {
				ct.keyIdx = append(ct.keyIdx, i)
			}
		}
	}
	isKey := func(name string) bool {
		for _, k := range tb.Key {
			if k == name {
				return true
			}
		}
		return false
	}
	cols := make([]string, len(tb.Columns))
	switch t.cfg.Driver {
	case DriverMySQL:
		for i, c := range tb.Columns {
			cols[i] = myIdent(c.Name)
		}
		parts := strings.Split(tb.Name, ".")
		for i := range parts {
			parts[i] = myIdent(parts[i])
		}
		ct.myPrefix = "INSERT INTO " + strings.Join(parts, ".") + " (" + strings.Join(cols, ",") + ") VALUES "
		ct.myRow = "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
		if tb.Upsert {
			var set []string
			for _, c := range tb.Columns {
				if !isKey(c.Name) {
					set = append(set, myIdent(c.Name)+"=VALUES("+myIdent(c.Name)+")")
				}
			}
			if len(set) == 0 {
				k := myIdent(tb.Key[0])
				set = []string{k + "=" + k}
			}
			ct.mySuffix = " ON DUPLICATE KEY UPDATE " + strings.Join(set, ",")
		}
	default:
		for i, c := range tb.Columns {
			cols[i] = pgx.Identifier{c.Name}.Sanitize()
		}
		ct.pgIdent = pgx.Identifier(strings.Split(tb.Name, "."))
		ct.pgPrefix = "INSERT INTO " + ct.pgIdent.Sanitize() + " (" + strings.Join(cols, ",") + ") VALUES "
		if tb.Upsert {
			keys := make([]string, len(tb.Key))
			for i, k := range tb.Key {
				keys[i] = pgx.Identifier{k}.Sanitize()
			}
			var set []string
			for _, c := range tb.Columns {
				if !isKey(c.Name) {
					id := pgx.Identifier{c.Name}.Sanitize()
					set = append(set, id+" = EXCLUDED."+id)
				}
			}
			ct.pgSuffix = " ON CONFLICT (" + strings.Join(keys, ",") + ") DO NOTHING"
			if len(set) > 0 {
				ct.pgSuffix = " ON CONFLICT (" + strings.Join(keys, ",") + ") DO UPDATE SET " + strings.Join(set, ", ")
			}
		}
	}
	return ct
}

func myIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// buffer holds a table's rows not yet sent.
type buffer struct {
	rows  [][]any
	bytes int
	keys  map[string]int // upsert: key -> index in rows (the last row wins)
}

// add appends a row; for an upsert a row with the same key replaces the
// buffered one (so that one statement never touches a row twice).
func (b *buffer) add(t *table, vals []any) {
	b.bytes += rowSize(vals)
	if t.Upsert {
		k := keyOf(t.keyIdx, vals)
		if i, ok := b.keys[k]; ok {
			b.rows[i] = vals
			return
		}
		if b.keys == nil {
			b.keys = map[string]int{}
		}
		b.keys[k] = len(b.rows)
	}
	b.rows = append(b.rows, vals)
}

// reset empties the buffer, keeping its capacity for the next rows.
func (b *buffer) reset() {
	clear(b.rows)
	b.rows, b.bytes, b.keys = b.rows[:0], 0, nil
}

func (b *buffer) full(t *table) bool {
	return b.bytes >= t.t.cfg.BatchBytes || len(b.rows) >= t.t.cfg.BatchRows
}

// keyOf renders the key columns of a row, whatever their Go types (a
// string "1" and an int64 1 land in the same column as the same key).
func keyOf(idx []int, vals []any) string {
	var sb strings.Builder
	for _, i := range idx {
		fmt.Fprint(&sb, vals[i])
		sb.WriteByte(0)
	}
	return sb.String()
}

// rowSize estimates a row's size in a statement.
func rowSize(vals []any) int {
	n := 3
	for _, v := range vals {
		switch x := v.(type) {
		case string:
			n += len(x) + 3
		case []byte:
			n += 2*len(x) + 4
		case nil:
			n += 5
		case time.Time:
			n += 30
		default:
			n += 22
		}
	}
	return n
}

// flush writes rows to t on the branch session sess (a *mysql.Conn or a
// *postgres.Conn). A failed statement is not retried: the caller aborts
// the checkpoint.
func (t *table) flush(ctx context.Context, lb *liveBranch, sess any, rows [][]any) error {
	switch s := sess.(type) {
	case *xamysql.Conn:
		return t.flushMySQL(ctx, lb, s, rows)
	case *xapg.Conn:
		return t.flushPostgres(ctx, s, rows)
	}
	return fmt.Errorf("sink: target %s: unexpected session %T", t.Target, sess)
}

// flushMySQL sends multi-row INSERTs, each below BatchBytes and the
// placeholder limit. A statement of a shape (row count) sent a second time
// in the branch is prepared on the server and reused, so the server parses
// batches of one size once (flushes of full batches all have the same).
func (t *table) flushMySQL(ctx context.Context, lb *liveBranch, c *xamysql.Conn, rows [][]any) error {
	cols := len(t.Columns)
	maxRows := max(1, maxPlaceholders/cols)
	for len(rows) > 0 {
		n, size := 0, len(t.myPrefix)+len(t.mySuffix)
		for n < len(rows) && n < maxRows {
			s := rowSize(rows[n])
			if n > 0 && size+s > t.t.cfg.BatchBytes {
				break
			}
			size += s
			n++
		}
		var sb strings.Builder
		sb.Grow(len(t.myPrefix) + n*(len(t.myRow)+1) + len(t.mySuffix))
		sb.WriteString(t.myPrefix)
		args := make([]any, 0, n*cols)
		for i := 0; i < n; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(t.myRow)
			args = append(args, rows[i]...)
		}
		sb.WriteString(t.mySuffix)
		st, err := lb.statement(ctx, c, sb.String())
		if err == nil {
			if st != nil {
				_, err = st.ExecContext(ctx, args...)
			} else {
				_, err = c.ExecContext(ctx, sb.String(), args...)
			}
		}
		if err != nil {
			return fmt.Errorf("sink: writing %d rows to %s on %s: %w", n, t.Name, t.Target, err)
		}
		rows = rows[n:]
	}
	return nil
}

// flushPostgres copies rows (INSERT) or sends batched multi-row INSERT ...
// ON CONFLICT statements in one pipeline (upsert).
func (t *table) flushPostgres(ctx context.Context, c *xapg.Conn, rows [][]any) error {
	if !t.Upsert {
		if _, err := c.CopyFrom(ctx, t.pgIdent, t.columnNames(), pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("sink: copying %d rows to %s on %s: %w", len(rows), t.Name, t.Target, err)
		}
		return nil
	}
	cols := len(t.Columns)
	chunk := max(1, min(pgUpsertChunk, maxPlaceholders/cols))
	batch := &pgx.Batch{}
	for len(rows) > 0 {
		n := chunk
		for n > len(rows) {
			n /= 2
		}
		var sb strings.Builder
		sb.WriteString(t.pgPrefix)
		args := make([]any, 0, n*cols)
		for i := 0; i < n; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteByte('(')
			for j := 0; j < cols; j++ {
				if j > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, "$%d", i*cols+j+1)
			}
			sb.WriteByte(')')
			args = append(args, rows[i]...)
		}
		sb.WriteString(t.pgSuffix)
		batch.Queue(sb.String(), args...)
		rows = rows[n:]
	}
	br := c.SendBatch(ctx, batch)
	var err error
	for i := 0; i < batch.Len() && err == nil; i++ {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sink: upserting rows to %s on %s: %w", t.Name, t.Target, err)
	}
	return nil
}

func (t *table) columnNames() []string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	return names
}

// statement returns the branch's prepared statement of query, preparing
// it when the query comes a second time; nil: send this one as text. The
// cache is keyed by the statement's text, so two tables (or an INSERT and
// an UPSERT of one table) never share a statement.
func (lb *liveBranch) statement(ctx context.Context, c *xamysql.Conn, query string) (*xamysql.Stmt, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if st := lb.stmts[query]; st != nil {
		return st, nil
	}
	if lb.seen == nil {
		lb.seen, lb.stmts = map[string]int{}, map[string]*xamysql.Stmt{}
	}
	if lb.seen[query]++; lb.seen[query] < 2 {
		return nil, nil
	}
	st, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	lb.stmts[query] = st
	return st, nil
}
