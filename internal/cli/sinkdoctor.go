package cli

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/internal/config"
	"github.com/xadb/xa/sink"
	"github.com/xadb/xa/xa"
)

// rawDB is a plain session on a participant's database, for the few
// catalogue reads doctor and sink setup make (the resource manager has no
// statements of its own to offer).
type rawDB struct {
	driver string
	pg     *pgx.Conn
	my     *sql.DB
}

func openRaw(ctx context.Context, p config.Participant) (*rawDB, error) {
	d := &rawDB{driver: p.Driver}
	switch p.Driver {
	case sink.DriverPostgres:
		c, err := pgx.Connect(ctx, p.DSN)
		if err != nil {
			return nil, err
		}
		d.pg = c
	case sink.DriverMySQL:
		cfg, err := gomysql.ParseDSN(p.DSN)
		if err != nil {
			return nil, err
		}
		conn, err := gomysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		d.my = sql.OpenDB(conn)
		d.my.SetMaxOpenConns(1)
		if err := d.my.PingContext(ctx); err != nil {
			d.my.Close()
			return nil, err
		}
	default:
		return nil, fmt.Errorf("participant %s: a %s participant cannot be a sink's target", p.Name, p.Driver)
	}
	return d, nil
}

func (d *rawDB) Close() {
	if d.pg != nil {
		d.pg.Close(context.Background())
	}
	if d.my != nil {
		d.my.Close()
	}
}

// tableExists reports whether the table ("table" or "schema.table", as a
// sink names it) exists, as the sink's statements would find it.
func (d *rawDB) tableExists(ctx context.Context, name string) (bool, error) {
	parts := strings.Split(name, ".")
	if d.pg != nil {
		var ok bool
		err := d.pg.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier(parts).Sanitize()).Scan(&ok)
		return ok, err
	}
	var schema any
	if len(parts) == 2 {
		schema = parts[0]
	}
	var n int
	err := d.my.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
		schema, parts[len(parts)-1]).Scan(&n)
	return n > 0, err
}

// tableExists opens a session on p to ask whether its table name exists.
func tableExists(ctx context.Context, p config.Participant, name string) (bool, error) {
	d, err := openRaw(ctx, p)
	if err != nil {
		return false, err
	}
	defer d.Close()
	return d.tableExists(ctx, name)
}

// pgSlots returns PostgreSQL's max_prepared_transactions and how many
// prepared transactions the server holds (every database).
func (d *rawDB) pgSlots(ctx context.Context) (max, inUse int, err error) {
	err = d.pg.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int, (SELECT count(*) FROM pg_prepared_xacts)::int").Scan(&max, &inUse)
	return max, inUse, err
}

// pgServer names the PostgreSQL server a DSN connects to: prepared-
// transaction slots are the server's, shared by its databases.
func pgServer(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return dsn
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// slotNeeds is what the configuration asks of one PostgreSQL server's
// prepared-transaction slots.
type slotNeeds struct {
	sinks map[string]int // by sink
	tm    int            // the transaction manager's pools
	parts []string       // participants on the server
}

func (n slotNeeds) sinkTotal() int {
	t := 0
	for _, v := range n.sinks {
		t += v
	}
	return t
}

// pgSlotNeeds adds up, per PostgreSQL server, the slots every sink's
// instances may hold at once (instances × (1 + max_pending) per target on
// it) and the transaction manager's (each pooled session may hold a
// branch in PREPARE: the participant's max_conns, default 32).
func pgSlotNeeds(c *config.Config) map[string]*slotNeeds {
	out := map[string]*slotNeeds{}
	for _, p := range c.Participants {
		if p.Driver != sink.DriverPostgres {
			continue
		}
		key := pgServer(p.DSN)
		n := out[key]
		if n == nil {
			n = &slotNeeds{sinks: map[string]int{}}
			out[key] = n
		}
		pool := p.MaxConns
		if pool <= 0 {
			pool = postgres.DefaultMaxConns
		}
		n.tm += pool
		n.parts = append(n.parts, p.Name)
		for _, s := range c.Sinks {
			for _, t := range s.Targets {
				if t == p.Name {
					n.sinks[s.Name] += s.PreparedSlots()
				}
			}
		}
	}
	return out
}

// doctorSink checks what sc needs of its targets: its bookkeeping tables
// and the tables it writes, PostgreSQL's prepared-transaction slots for
// its instances, and on MySQL what XA RECOVER holds and the PROCESS
// privilege its restore needs.
// checked holds the participants' own findings (their PROCESS privilege).
func doctorSink(ctx context.Context, c *config.Config, sc config.Sink, checked map[string][]xa.Finding, g *globals) []xa.Finding {
	var fs []xa.Finding
	add := func(name, value string, sev xa.Severity, fix string) {
		fs = append(fs, xa.Finding{Name: name, Value: value, Severity: sev, Fix: fix})
	}
	raws := map[string]*rawDB{}
	defer func() {
		for _, d := range raws {
			d.Close()
		}
	}()
	raw := func(target string) (*rawDB, error) {
		if d := raws[target]; d != nil {
			return d, nil
		}
		p, _ := c.Participant(target)
		d, err := openRaw(ctx, p)
		if err != nil {
			return nil, err
		}
		raws[target] = d
		return d, nil
	}

	// The bookkeeping tables.
	if d, err := raw(sc.Progress); err != nil {
		add("sink tables", fmt.Sprintf("progress target %s could not be reached: %v", sc.Progress, err), xa.SeverityFail, "see participant "+sc.Progress)
	} else {
		var missing []string
		var errs []string
		for _, t := range sinkTableNames {
			ok, err := d.tableExists(ctx, t)
			switch {
			case err != nil:
				errs = append(errs, err.Error())
			case !ok:
				missing = append(missing, t)
			}
		}
		switch {
		case len(errs) > 0:
			add("sink tables", "could not be checked: "+strings.Join(errs, "; "), xa.SeverityFail, "the sink's user must be able to read the catalogue of "+sc.Progress)
		case len(missing) > 0:
			add("sink tables", fmt.Sprintf("missing in %s: %s", sc.Progress, strings.Join(missing, ", ")), xa.SeverityFail,
				fmt.Sprintf("xactl sink setup %s creates them", sc.Name))
		default:
			add("sink tables", fmt.Sprintf("present in %s (%s)", sc.Progress, strings.Join(sinkTableNames, ", ")), xa.SeverityOK, "")
		}
	}
	// The tables it writes.
	for _, t := range sc.Tables {
		name := "table " + t.Target + ": " + t.Name
		d, err := raw(t.Target)
		if err != nil {
			add(name, "target could not be reached: "+err.Error(), xa.SeverityFail, "see participant "+t.Target)
			continue
		}
		switch ok, err := d.tableExists(ctx, t.Name); {
		case err != nil:
			add(name, "could not be checked: "+err.Error(), xa.SeverityFail, "the sink's user must be able to read the catalogue of "+t.Target)
		case !ok:
			cols := make([]string, 0, len(t.Columns))
			for _, col := range sink.ColumnsFromMap(t.Columns) {
				cols = append(cols, col.Name)
			}
			fix := fmt.Sprintf("create it with the columns %s", strings.Join(cols, ", "))
			if t.Mode == config.ModeUpsert {
				fix += fmt.Sprintf(" and a unique key on (%s)", strings.Join(t.Key, ", "))
			}
			add(name, "missing", xa.SeverityFail, fix)
		default:
			add(name, "present", xa.SeverityOK, "")
		}
	}

	needs := pgSlotNeeds(c)
	seenServer := map[string]bool{}
	for _, target := range sc.Targets {
		p, _ := c.Participant(target)
		switch p.Driver {
		case sink.DriverPostgres:
			key := pgServer(p.DSN)
			if seenServer[key] {
				continue // slots are the server's: counted once
			}
			seenServer[key] = true
			fs = append(fs, pgSlotFinding(ctx, raw, target, key, needs[key], sc))
		case sink.DriverMySQL:
			fs = append(fs, mysqlSinkFindings(ctx, p, sc, checked[p.Name], g)...)
		}
	}
	return fs
}

// pgSlotFinding compares max_prepared_transactions with what the sinks and
// the transaction manager may hold prepared at once on the server.
func pgSlotFinding(ctx context.Context, raw func(string) (*rawDB, error), target, server string, n *slotNeeds, sc config.Sink) xa.Finding {
	f := xa.Finding{Name: "prepared-transaction slots (" + target + ")"}
	d, err := raw(target)
	var max, inUse int
	if err == nil {
		max, inUse, err = d.pgSlots(ctx)
	}
	if err != nil {
		f.Value, f.Severity, f.Fix = "could not be read: "+err.Error(), xa.SeverityFail, "see participant "+target
		return f
	}
	mine, sinks := n.sinks[sc.Name], n.sinkTotal()
	need := sinks + n.tm
	f.Value = fmt.Sprintf("max_prepared_transactions %d on %s, %d prepared now; sink %s needs %d (%s × (1 + %d pending))",
		max, server, inUse, sc.Name, mine, plural(sc.Instances, "instance"), sc.Checkpoint.MaxPending)
	if per := sc.PreparedSlots(); per > 0 && mine != per {
		f.Value += fmt.Sprintf(", for %d of its targets on this server", mine/per)
	}
	if len(n.sinks) > 1 {
		f.Value += fmt.Sprintf(", every sink on the server %d", sinks)
	}
	f.Value += fmt.Sprintf(", the transaction manager's pools %d (%s): %d in all", n.tm, strings.Join(n.parts, ", "), need)
	fix := fmt.Sprintf("set max_prepared_transactions >= %d in postgresql.conf and restart the server: PREPARE TRANSACTION fails (53200) once the slots run out", need)
	switch {
	case max < sinks:
		f.Severity = xa.SeverityFail
		f.Fix = fix + fmt.Sprintf("; below %d the sinks' own checkpoints abort again and again (or lower instances or checkpoint.max_pending)", sinks)
	case max < need:
		f.Severity, f.Fix = xa.SeverityWarn, fix+" (when the sinks and the transaction manager peak together)"
	default:
		f.Severity = xa.SeverityOK
	}
	return f
}

// mysqlSinkFindings reports what XA RECOVER holds on a MySQL target and
// whether the PROCESS privilege is there: the sink's restore commits and
// rolls back branches of other sessions, which needs it.
func mysqlSinkFindings(ctx context.Context, pc config.Participant, sc config.Sink, checks []xa.Finding, g *globals) []xa.Finding {
	p, err := openParticipant(ctx, pc, g.logger())
	if err != nil {
		return []xa.Finding{{Name: "XA RECOVER (" + pc.Name + ")", Value: "could not connect: " + err.Error(), Severity: xa.SeverityFail, Fix: "see participant " + pc.Name}}
	}
	defer p.close()
	var fs []xa.Finding
	list, err := p.rm.Recover(ctx)
	if err != nil {
		fs = append(fs, xa.Finding{Name: "XA RECOVER (" + pc.Name + ")", Value: err.Error(), Severity: xa.SeverityFail, Fix: "the sink's restore lists its branches with XA RECOVER: see participant " + pc.Name})
	} else {
		mine, sinks := 0, 0
		for _, b := range list {
			if ref, ok := sink.ParseXID(b.XID); ok {
				sinks++
				if ref.Sink == sc.Name {
					mine++
				}
			}
		}
		fs = append(fs, xa.Finding{Name: "XA RECOVER (" + pc.Name + ")",
			Value: fmt.Sprintf("%s prepared on the server, %d of sink %s, %d of sinks in all (MySQL sets no limit on prepared branches; each holds its row locks)",
				plural(len(list), "branch"), mine, sc.Name, sinks), Severity: xa.SeverityOK})
	}
	f := xa.Finding{Name: "PROCESS privilege (" + pc.Name + ")", Value: "unknown: the check did not say", Severity: xa.SeverityWarn}
	for _, c := range checks {
		if c.Name == "PROCESS privilege" {
			f.Value, f.Severity = c.Value, c.Severity
		}
	}
	if f.Severity != xa.SeverityOK {
		f.Fix = "the sink's restore commits a decided branch left by a crashed instance from another session, which waits until it sees " +
			"that session gone (information_schema.INNODB_TRX, fact 7): without PROCESS such branches stay prepared, holding their locks, " +
			"until the server restarts. " + strings.TrimPrefix(grantOf(checks), "; ")
	}
	return append(fs, f)
}

// grantOf returns the GRANT statement the driver's PROCESS finding
// suggests, if any.
func grantOf(checks []xa.Finding) string {
	for _, c := range checks {
		if c.Name == "PROCESS privilege" {
			if i := strings.Index(c.Fix, "GRANT PROCESS"); i >= 0 {
				return c.Fix[i:]
			}
		}
	}
	return "GRANT PROCESS ON *.* TO the sink's user"
}
