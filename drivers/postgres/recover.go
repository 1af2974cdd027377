package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/xadb/xa/xa"
)

// Recover lists the prepared transactions of the current database, ours
// and everybody else's. A gid that xa.ParseXID does not accept (another
// application's) is listed with a zero XID and Raw set: callers filter with
// xa.Owned and never touch it.
//
// Each branch comes with its prepare time (Prepared) and with its age by
// the server's own clock (ServerAge: clock_timestamp() - prepared, read in
// the same query), so that recovery never compares the server's prepare
// time with another clock. ServerAge is at least one nanosecond: zero
// would make xa.PreparedBranch.Age fall back to the caller's clock.
func (rm *RM) Recover(ctx context.Context) ([]xa.PreparedBranch, error) {
	// clock_timestamp(), not now(): now() is fixed when the statement's
	// transaction starts, before pg_prepared_xacts is read, so a branch
	// prepared in between would look younger than zero.
	rows, err := rm.pool.Query(ctx,
		`SELECT gid, prepared, (extract(epoch FROM clock_timestamp() - prepared) * 1000000)::bigint, owner::text, database::text
		FROM pg_prepared_xacts WHERE database = current_database() ORDER BY prepared, gid`,
		pgx.QueryExecModeExec)
	if err != nil {
		return nil, rm.xaErr(opRecover, xa.XID{}, err)
	}
	var out []xa.PreparedBranch
	for rows.Next() {
		var p xa.PreparedBranch
		var ageMicros int64
		if err := rows.Scan(&p.Raw, &p.Prepared, &ageMicros, &p.Owner, &p.Database); err != nil {
			rows.Close()
			return nil, rm.xaErr(opRecover, xa.XID{}, err)
		}
		p.ServerAge = max(time.Duration(ageMicros)*time.Microsecond, time.Nanosecond)
		if x, err := xa.ParseXID(p.Raw); err == nil {
			p.XID = x
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, rm.xaErr(opRecover, xa.XID{}, err)
	}
	return out, nil
}
