package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/xadb/xa/xa"
)

// minServerVersion is PostgreSQL 12.
const minServerVersion = 120000

// Check inspects the server as the transaction manager needs it and returns
// one finding per item:
//
//   - server_version_num: at least 120000 (PostgreSQL 12), else Fail;
//   - max_prepared_transactions: 0 (the default) disables prepared
//     transactions: Fail, with the fix (set it, e.g. to max_connections,
//     in postgresql.conf and restart; fact 11); Warn when it is smaller
//     than this resource manager's pool, since every pooled session may
//     hold a branch in PREPARE at once (and other clients share the
//     slots);
//   - pg_prepared_xacts: readable by this role, else Fail (recovery lists
//     branches there);
//   - superuser: Warn when the role is not one: COMMIT PREPARED and
//     ROLLBACK PREPARED succeed only for the role that prepared the
//     branch or a superuser, so every node, the recovery scanner and
//     xactl must connect as this role;
//   - oldest prepared transaction in this database: Warn when one is
//     older than ten minutes: prepared transactions keep their locks and
//     hold back VACUUM (transaction id wraparound; fact 15);
//   - durability: synchronous_commit as this role's sessions start (the
//     server's, the database's and the role's settings), fsync and
//     full_page_writes: Warn when a commit can be lost in a crash after
//     it answered. The decisions this participant stores (last-resource
//     commits, abort markers) force synchronous_commit themselves; the
//     prepared branches and everything else do not, and fsync or
//     full_page_writes off risk them all;
//   - identity: the database's (and the decision table's), as Open read
//     them;
//   - clock skew between the server and this machine (xa.ClockFinding).
//
// The error is xa.CheckFindings' (wrapping xa.ErrMisconfigured) when a
// finding fails, or the error that kept the check from running.
func (rm *RM) Check(ctx context.Context) ([]xa.Finding, error) {
	conn, err := rm.pool.Acquire(ctx)
	if err != nil {
		return nil, rm.xaErr(opCheck, xa.XID{}, err)
	}
	defer conn.Release()
	c := conn.Conn()

	var (
		version, mpt, maxConns int
		super                  bool
		user                   string
	)
	err = c.QueryRow(ctx, `SELECT current_setting('server_version_num')::int,
		current_setting('max_prepared_transactions')::int,
		current_setting('max_connections')::int,
		current_setting('is_superuser') = 'on',
		current_user::text`, pgx.QueryExecModeExec).Scan(&version, &mpt, &maxConns, &super, &user)
	if err != nil {
		return nil, rm.xaErr(opCheck, xa.XID{}, err)
	}
	var fs []xa.Finding
	add := func(name, value string, sev xa.Severity, fix string) {
		fs = append(fs, xa.Finding{Name: name, Value: value, Severity: sev, Fix: fix})
	}

	if version >= minServerVersion {
		add("server_version_num", fmt.Sprint(version), xa.SeverityOK, "")
	} else {
		add("server_version_num", fmt.Sprint(version), xa.SeverityFail, "upgrade to PostgreSQL 12 or later")
	}

	pool := int(rm.pool.Config().MaxConns)
	mptValue := fmt.Sprintf("%d (max_connections %d, pool size %d)", mpt, maxConns, pool)
	switch {
	case mpt == 0:
		add("max_prepared_transactions", mptValue, xa.SeverityFail,
			fmt.Sprintf("prepared transactions are disabled: set max_prepared_transactions > 0 (e.g. = max_connections = %d) in postgresql.conf and restart the server", maxConns))
	case mpt < pool:
		add("max_prepared_transactions", mptValue, xa.SeverityWarn,
			fmt.Sprintf("fewer prepared-transaction slots than pooled sessions: PREPARE fails with 53200 when they run out; set max_prepared_transactions >= %d (e.g. = max_connections = %d) in postgresql.conf and restart", pool, maxConns))
	default:
		add("max_prepared_transactions", mptValue, xa.SeverityOK, "")
	}

	var (
		n       int
		oldest  *time.Time
		xidAge  *int
		oldGid  *string
		now     time.Time
		readErr error
	)
	readErr = c.QueryRow(ctx, `SELECT count(*)::int, min(prepared), max(age(transaction))::int,
		(SELECT gid FROM pg_prepared_xacts WHERE database = current_database() ORDER BY prepared LIMIT 1), now()
		FROM pg_prepared_xacts WHERE database = current_database()`, pgx.QueryExecModeExec).Scan(&n, &oldest, &xidAge, &oldGid, &now)
	if readErr != nil {
		add("pg_prepared_xacts", "not readable: "+readErr.Error(), xa.SeverityFail,
			fmt.Sprintf("grant role %s SELECT on pg_prepared_xacts (recovery lists in-doubt branches there)", user))
	} else {
		add("pg_prepared_xacts", "readable", xa.SeverityOK, "")
	}

	if super {
		add("superuser", fmt.Sprintf("yes (role %s)", user), xa.SeverityOK, "")
	} else {
		add("superuser", fmt.Sprintf("no (role %s)", user), xa.SeverityWarn,
			fmt.Sprintf("COMMIT PREPARED and ROLLBACK PREPARED succeed only for the role that prepared the branch or a superuser: run every transaction manager node, the recovery scanner and xactl as role %s", user))
	}

	if readErr == nil {
		switch {
		case n == 0 || oldest == nil:
			add("oldest prepared transaction", "none in this database", xa.SeverityOK, "")
		default:
			age := now.Sub(*oldest).Round(time.Second)
			value := fmt.Sprintf("%d prepared in this database; oldest %q prepared %s ago", n, deref(oldGid), age)
			if xidAge != nil {
				value += fmt.Sprintf(", xid age %d", *xidAge)
			}
			if age >= rm.oldPrepared {
				add("oldest prepared transaction", value, xa.SeverityWarn,
					"prepared transactions keep their locks and hold back VACUUM (transaction id wraparound): "+
						"let recovery resolve those of this transaction manager (xactl), and have their owners resolve the others")
			} else {
				add("oldest prepared transaction", value, xa.SeverityOK, "")
			}
		}
	}
	fs = append(fs, rm.durabilityFindings(ctx, c)...)
	if id, err := rm.Identity(); err == nil {
		add("identity", id.String(), xa.SeverityOK, "")
	}
	if rm.decisions != "" {
		add("decision table", fmt.Sprintf("%s, identity %s", rm.decisionsText, rm.tableIdent.ID), xa.SeverityOK, "")
	}
	sent := time.Now()
	var server time.Time
	if err := c.QueryRow(ctx, "SELECT clock_timestamp()", pgx.QueryExecModeExec).Scan(&server); err != nil {
		return fs, rm.xaErr(opCheck, xa.XID{}, err)
	}
	fs = append(fs, xa.ClockFinding(server, sent, time.Now()))
	return fs, xa.CheckFindings(rm.name, fs)
}

// durabilityFindings reports the settings under which a commit that
// answered can be lost in a crash.
func (rm *RM) durabilityFindings(ctx context.Context, c *pgx.Conn) []xa.Finding {
	var sc, fsync, fpw string
	err := c.QueryRow(ctx, "SELECT current_setting('synchronous_commit'), current_setting('fsync'), current_setting('full_page_writes')",
		pgx.QueryExecModeExec).Scan(&sc, &fsync, &fpw)
	if err != nil {
		return []xa.Finding{{Name: "durability", Value: "not readable: " + err.Error(), Severity: xa.SeverityWarn,
			Fix: "let the role read synchronous_commit, fsync and full_page_writes"}}
	}
	var fs []xa.Finding
	switch sc {
	case "off", "local":
		fs = append(fs, xa.Finding{Name: "synchronous_commit", Value: sc, Severity: xa.SeverityWarn,
			Fix: "a commit may answer before it is durable (off: before the WAL flush; local: before a synchronous standby has it): " +
				"prepared branches and one-phase commits can be lost in a crash after they answered; xa forces it on for the decisions " +
				"it stores, but set synchronous_commit = on for the role and database (ALTER ROLE/DATABASE ... RESET synchronous_commit) " +
				"and in postgresql.conf"})
	default:
		fs = append(fs, xa.Finding{Name: "synchronous_commit", Value: sc, Severity: xa.SeverityOK})
	}
	for _, v := range []struct{ name, value, why string }{
		{"fsync", fsync, "nothing is durable: a crash of the machine loses commits, prepared branches and decisions"},
		{"full_page_writes", fpw, "a crash during a page write can corrupt data and prepared transactions"},
	} {
		if v.value == "off" {
			fs = append(fs, xa.Finding{Name: v.name, Value: v.value, Severity: xa.SeverityWarn,
				Fix: v.why + ": set " + v.name + " = on in postgresql.conf and reload"})
		} else {
			fs = append(fs, xa.Finding{Name: v.name, Value: v.value, Severity: xa.SeverityOK})
		}
	}
	return fs
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
