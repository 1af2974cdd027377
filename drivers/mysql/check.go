package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/xadb/xa/xa"
)

// Check inspects the server for what two-phase commit needs: version,
// InnoDB, the XA RECOVER and PROCESS privileges, and the settings that
// bear on durability and waiting. Each finding that is not fine says how
// to fix it. The error is xa.CheckFindings(...) when a finding fails, or
// the error that stopped the check.
func (rm *RM) Check(ctx context.Context) ([]xa.Finding, error) {
	var fs []xa.Finding
	add := func(name, value string, sev xa.Severity, fix string) {
		fs = append(fs, xa.Finding{Name: name, Value: value, Severity: sev, Fix: fix})
	}
	fail := func(err error) ([]xa.Finding, error) { return fs, rm.wrap(opCheck, xa.XID{}, err) }

	var version, comment, engine, user string
	var logBin, syncBinlog int64
	err := rm.db.QueryRowContext(ctx, "SELECT VERSION(), @@version_comment, @@default_storage_engine, @@log_bin, @@sync_binlog, CURRENT_USER()").
		Scan(&version, &comment, &engine, &logBin, &syncBinlog, &user)
	if err != nil {
		return fail(err)
	}
	grantee := quoteAccount(user)
	si := parseVersion(version)
	if containsFold(comment, "mariadb") {
		si.mariaDB = true
	}
	fs = append(fs, versionFinding(si))

	var support string
	err = rm.db.QueryRowContext(ctx, "SELECT SUPPORT FROM information_schema.ENGINES WHERE ENGINE = 'InnoDB'").Scan(&support)
	switch {
	case err == sql.ErrNoRows:
		support = "absent"
	case err != nil:
		return fail(err)
	}
	innodb := support == "YES" || support == "DEFAULT"
	if innodb {
		add("InnoDB", support, xa.SeverityOK, "")
	} else {
		add("InnoDB", support, xa.SeverityFail, "XA needs a transactional engine: start the server with InnoDB enabled")
	}
	if strings.EqualFold(engine, "InnoDB") {
		add("default_storage_engine", engine, xa.SeverityOK, "")
	} else {
		add("default_storage_engine", engine, xa.SeverityWarn,
			"tables created without ENGINE=InnoDB take no part in XA: SET GLOBAL default_storage_engine=InnoDB (and in the server config)")
	}

	n, err := rm.recoverCount(ctx)
	switch kind := classify(opRecover, err); {
	case err == nil:
		add("XA RECOVER", fmt.Sprintf("permitted (%d prepared branches listed)", n), xa.SeverityOK, "")
	case kind == xa.ErrMisconfigured:
		add("XA RECOVER", "refused: "+err.Error(), xa.SeverityFail,
			fmt.Sprintf("recovery cannot list prepared branches: GRANT XA_RECOVER_ADMIN ON *.* TO %s (MySQL 8)", grantee))
	case connectionLost(err):
		return fail(err)
	default:
		add("XA RECOVER", "failed: "+err.Error(), xa.SeverityFail, "XA RECOVER must work for recovery: see the server's error")
	}

	var trx int
	err = rm.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX").Scan(&trx)
	switch kind := classify(opCheck, err); {
	case err == nil:
		add("PROCESS privilege", "granted", xa.SeverityOK, "")
	case kind == xa.ErrMisconfigured:
		add("PROCESS privilege", "missing: branches finished from another session stay pending: "+err.Error(), xa.SeverityWarn,
			fmt.Sprintf("without it the RM cannot see whether InnoDB has detached a prepared branch from the session that prepared it "+
				"(information_schema.INNODB_TRX; committing it from another session before then can lose the commit, fact 7), "+
				"so a branch whose phase 2 must be done from another session (after its session broke, and in recovery) stays pending: "+
				"RM.Commit and RM.Rollback answer ErrRetryable until the privilege is granted or the server restarts. "+
				"Recovery also cannot count ghost branches (UnlistedPrepared, SHOW ENGINE INNODB STATUS), so it keeps the decision records "+
				"of the branches it resolved (and a last resource's decision rows): GRANT PROCESS ON *.* TO %s", grantee))
	case connectionLost(err):
		return fail(err)
	default:
		add("PROCESS privilege", "unknown: "+err.Error(), xa.SeverityWarn, fmt.Sprintf("GRANT PROCESS ON *.* TO %s", grantee))
	}

	if !si.mariaDB && si.atLeast(8, 0, 29) {
		// MySQL 8.0.29+ only.
		var detach int64
		if err := rm.db.QueryRowContext(ctx, "SELECT @@GLOBAL.xa_detach_on_prepare").Scan(&detach); err != nil {
			return fail(err)
		}
		if detach == 1 {
			add("xa_detach_on_prepare", "ON (a prepared branch leaves its session at XA PREPARE)", xa.SeverityOK, "")
		} else {
			add("xa_detach_on_prepare", "OFF (a prepared branch stays attached to its session until it disconnects)", xa.SeverityOK, "")
		}
	}

	if innodb {
		var lockWait, flush int64
		if err := rm.db.QueryRowContext(ctx, "SELECT @@innodb_lock_wait_timeout, @@innodb_flush_log_at_trx_commit").Scan(&lockWait, &flush); err != nil {
			return fail(err)
		}
		add("innodb_lock_wait_timeout", strconv.FormatInt(lockWait, 10)+"s", xa.SeverityOK, "")
		if flush == 1 {
			add("innodb_flush_log_at_trx_commit", "1", xa.SeverityOK, "")
		} else {
			add("innodb_flush_log_at_trx_commit", strconv.FormatInt(flush, 10), xa.SeverityWarn,
				"a prepared branch may be lost in a crash: SET GLOBAL innodb_flush_log_at_trx_commit=1 (and in the server config)")
		}
	}

	var mode string
	if err := rm.db.QueryRowContext(ctx, "SELECT @@GLOBAL.sql_mode").Scan(&mode); err != nil {
		return fail(err)
	}
	fs = append(fs, sqlModeFinding(mode))

	if logBin == 1 {
		if syncBinlog == 1 {
			add("log_bin", "ON, sync_binlog=1", xa.SeverityOK, "")
		} else {
			add("log_bin", fmt.Sprintf("ON, sync_binlog=%d", syncBinlog), xa.SeverityWarn,
				"prepared branches may be missing from the binary log after an OS crash: SET GLOBAL sync_binlog=1")
		}
	} else {
		add("log_bin", "OFF", xa.SeverityOK, "")
	}
	sent := time.Now()
	var us int64
	if err := rm.db.QueryRowContext(ctx, "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)").Scan(&us); err != nil {
		return fail(err)
	}
	if id, err := rm.Identity(); err == nil {
		add("identity", id.String(), xa.SeverityOK, "")
	}
	fs = append(fs, xa.ClockFinding(time.UnixMicro(us), sent, time.Now()))
	return fs, xa.CheckFindings(rm.name, fs)
}

// recoverCount returns the number of rows of XA RECOVER.
func (rm *RM) recoverCount(ctx context.Context) (int, error) {
	rows, err := rm.db.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// quoteAccount turns CURRENT_USER() (user@host) into 'user'@'host'.
func quoteAccount(s string) string {
	i := strings.LastIndexByte(s, '@')
	if i < 0 {
		return "'" + s + "'"
	}
	return "'" + s[:i] + "'@'" + s[i+1:] + "'"
}

// versionFinding grades the server version.
func versionFinding(si serverInfo) xa.Finding {
	f := xa.Finding{Name: "server version", Value: si.flavor() + " " + si.version, Severity: xa.SeverityOK}
	switch {
	case si.mariaDB && !si.atLeast(10, 5, 0):
		f.Severity = xa.SeverityFail
		f.Fix = "MariaDB before 10.5 rolls a prepared XA branch back when its session disconnects: upgrade to MariaDB 10.5 or later"
	case !si.mariaDB && !si.atLeast(8, 0, 0):
		f.Severity = xa.SeverityFail
		f.Fix = "MySQL before 8.0 is not supported (before 5.7.7 a prepared XA branch does not survive a disconnect): upgrade to MySQL 8.0 or later"
	}
	return f
}

// sqlModeFinding grades the server's global sql_mode: without
// STRICT_TRANS_TABLES or STRICT_ALL_TABLES a value a column cannot hold is
// changed, not refused ("abc" into INT is stored as 0, 50 characters into
// VARCHAR(10) as the first 10), and the statement succeeds with a warning
// that applications rarely read. A warning, not a failure: two-phase
// commit does not depend on it, and the exactly-once sink sets strict
// mode on its own sessions (docs/sink.md).
func sqlModeFinding(mode string) xa.Finding {
	for m := range strings.SplitSeq(strings.ToUpper(mode), ",") {
		if m == "STRICT_TRANS_TABLES" || m == "STRICT_ALL_TABLES" {
			return xa.Finding{Name: "sql_mode", Value: mode, Severity: xa.SeverityOK}
		}
	}
	shown := mode
	if shown == "" {
		shown = "(empty)"
	}
	return xa.Finding{Name: "sql_mode", Value: shown + " (not strict)", Severity: xa.SeverityWarn,
		Fix: "a value a column cannot hold is changed instead of refused (text into an integer column stored as 0, a long string cut to the column's length): " +
			"SET GLOBAL sql_mode = CONCAT_WS(',', NULLIF(@@GLOBAL.sql_mode, ''), 'STRICT_TRANS_TABLES') (and in the server config). " +
			"The exactly-once sink's sessions add STRICT_ALL_TABLES themselves; other clients do not"}
}
