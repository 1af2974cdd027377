package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/xadb/xa/xa"
)

// Recover lists every prepared branch the server holds (XA RECOVER), this
// TM's and everybody else's; callers filter with xa.Owned. Raw is
// X'gtrid',X'bqual',formatID; Prepared is zero (MySQL does not say).
// Rows that are not valid XIDs are listed with a zero XID.
func (rm *RM) Recover(ctx context.Context) ([]xa.PreparedBranch, error) {
	ps, err := recoverOn(ctx, rm.db)
	if err != nil {
		return nil, rm.wrap(opRecover, xa.XID{}, err)
	}
	return ps, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func recoverOn(ctx context.Context, q querier) ([]xa.PreparedBranch, error) {
	rows, err := q.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	rs, err := scanRecover(rows)
	if err != nil {
		return nil, err
	}
	ps := make([]xa.PreparedBranch, len(rs))
	for i, r := range rs {
		ps[i] = r.branch
	}
	return ps, nil
}

// recoverRow is one row of XA RECOVER.
type recoverRow struct {
	formatID     int64
	gtrid, bqual []byte
	branch       xa.PreparedBranch
}

// scanRecover reads the rows of XA RECOVER.
func scanRecover(rows *sql.Rows) ([]recoverRow, error) {
	var rs []recoverRow
	for rows.Next() {
		var formatID, gl, bl int64
		var data []byte
		if err := rows.Scan(&formatID, &gl, &bl, &data); err != nil {
			return nil, err
		}
		r := recoverRow{formatID: formatID, branch: parseRecoverRow(formatID, gl, bl, data)}
		if gl >= 0 && bl >= 0 && gl+bl == int64(len(data)) {
			r.gtrid, r.bqual = data[:gl], data[gl:]
		}
		rs = append(rs, r)
	}
	return rs, rows.Err()
}

// UnlistedPrepared counts the prepared InnoDB transactions that XA RECOVER
// does not list: "ghost" branches left by the race of fact 7, which hold
// their locks and reappear in XA RECOVER after a restart. The count is the
// server's, whatever database the RM is on: every RM on the same server
// gets the same answer. It needs the PROCESS privilege (SHOW ENGINE
// INNODB STATUS); without it the error is ErrMisconfigured.
//
// InnoDB shows each transaction's state there, "ACTIVE (PREPARED)" for a
// prepared one, and the session it is attached to, if any; XA RECOVER lists
// prepared branches attached to a live session as well as detached ones.
// A ghost is a prepared InnoDB transaction attached to no session and not
// listed. So the count is
//
//	(prepared transactions attached to no session)
//	  - (listed branches - prepared transactions attached to a session)
//
// where the listed branches are those that XA RECOVER lists both before
// and after the InnoDB reading, all read in one round trip: a branch
// prepared, committed or detached meanwhile makes the count too high for
// this call, never too low. Branches still attached to their session
// (in-flight transactions, other applications') do not hide ghosts.
//
// What MariaDB 10.11 does not expose is which listed XID is which InnoDB
// transaction. The count is exact while every listed branch has a prepared
// InnoDB transaction; a listed branch that has none hides one ghost. That
// is the case of a detached branch that wrote nothing (plain or locking
// reads, or nothing at all: InnoDB forgets the transaction when the
// session detaches it, and XA COMMIT answers 1402) and of an attached
// branch that never touched an InnoDB table (InnoDB shows its transaction
// "not started"); see TestListedBranchesWithoutPreparedTransaction. A
// result above 0 that persists means ghosts: restart the server, then run
// recovery, which will find them in XA RECOVER.
func (rm *RM) UnlistedPrepared(ctx context.Context) (int, error) {
	s, err := rm.newSession(ctx)
	if err != nil {
		return 0, rm.wrap(opUnlisted, xa.XID{}, err)
	}
	n, err := unlistedOn(ctx, s.conn)
	s.release(err == nil)
	switch {
	case errNumber(err) == erSpecificAccess:
		return 0, rm.rmError(opUnlisted, xa.XID{}, xa.ErrMisconfigured,
			fmt.Errorf("%w (fix: GRANT PROCESS ON *.* TO %s)", err, rm.user))
	case err != nil:
		return 0, rm.wrap(opUnlisted, xa.XID{}, err)
	}
	return n, nil
}

// unlistedOn counts the ghosts (see UnlistedPrepared) in one round trip.
func unlistedOn(ctx context.Context, q querier) (int, error) {
	rows, err := q.QueryContext(ctx, "XA RECOVER; SHOW ENGINE INNODB STATUS; XA RECOVER")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	before, err := scanRecover(rows)
	if err != nil {
		return 0, err
	}
	if !rows.NextResultSet() {
		return 0, fmt.Errorf("SHOW ENGINE INNODB STATUS returned no result: %w", rows.Err())
	}
	var typ, name, status string
	if err := scanOne(rows, &typ, &name, &status); err != nil {
		return 0, fmt.Errorf("SHOW ENGINE INNODB STATUS: %w", err)
	}
	if !rows.NextResultSet() {
		return 0, fmt.Errorf("XA RECOVER returned no result: %w", rows.Err())
	}
	after, err := scanRecover(rows)
	if err != nil {
		return 0, err
	}
	rows.Close()
	attached, detached, err := preparedTransactions(status)
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, r := range before {
		seen[r.branch.Raw] = true
	}
	listed := 0
	for _, r := range after {
		if seen[r.branch.Raw] {
			listed++
		}
	}
	return max(0, detached-max(0, listed-attached)), nil
}

// preparedTransactions counts the prepared transactions in the output of
// SHOW ENGINE INNODB STATUS: those attached to a session and those attached
// to none. Measured on MariaDB 10.11, each transaction is a paragraph of
// the TRANSACTIONS section:
//
//	---TRANSACTION 26, ACTIVE (PREPARED) 0 sec
//	1 lock struct(s), heap size 1128, 0 row lock(s), undo log entries 1
//	MariaDB thread id 8, OS thread handle 140217533560512, query id 20 127.0.0.1 root
//
// and a prepared transaction attached to no session (detached, recovered
// after a restart, or a ghost) has no thread line and ends its first line
// with "recovered trx". MySQL 8 writes "MySQL thread id".
func preparedTransactions(status string) (attached, detached int, err error) {
	const list = "LIST OF TRANSACTIONS FOR EACH SESSION:"
	i := strings.Index(status, list)
	if i < 0 {
		return 0, 0, errors.New("SHOW ENGINE INNODB STATUS lists no transactions")
	}
	if strings.Contains(status, "...truncated...") {
		return 0, 0, errors.New("SHOW ENGINE INNODB STATUS was truncated: too many transactions to count")
	}
	section := status[i+len(list):]
	if end := strings.Index(section, "\n--------\n"); end >= 0 {
		section = section[:end]
	}
	for _, trx := range strings.Split(section, "\n---TRANSACTION ")[1:] {
		first, _, _ := strings.Cut(trx, "\n")
		if !strings.Contains(first, "(PREPARED)") {
			continue
		}
		if strings.Contains(trx, "\nMariaDB thread id ") || strings.Contains(trx, "\nMySQL thread id ") {
			attached++
		} else {
			detached++
		}
	}
	return attached, detached, nil
}

// ServerKey identifies the server the RM is connected to
// (xa.SharedServer): RMs on different databases of one server get
// the same key, RMs on different servers different keys, and it stays the
// same while the server runs (a restart changes it). XA RECOVER lists
// every branch of the server, whatever database the RM is on, so recovery
// must act on each branch once.
//
// MariaDB has no per-installation id, so the key combines what tells two
// servers apart, all read from the server itself (never from the DSN, which
// differs for RMs reaching one server through different addresses):
// @@server_uid (a hash of a MAC address of the host and the port),
// @@hostname, @@port, @@datadir, and the second the server process started
// (serverStartQuery). MySQL 8 has @@server_uuid, unique per data
// directory, which replaces @@server_uid.
func (rm *RM) ServerKey(ctx context.Context) (string, error) {
	s, err := rm.newSession(ctx)
	if err != nil {
		return "", rm.wrap(opServerKey, xa.XID{}, err)
	}
	defer s.release(true)
	uid := "@@server_uid"
	flavor := "mariadb"
	if !s.server.mariaDB {
		uid, flavor = "@@server_uuid", "mysql"
	}
	var id, host, datadir string
	var port, started int64
	q := "SELECT " + uid + ", @@hostname, @@port, @@datadir, (" + serverStartQuery(s.server) + ")"
	err = s.conn.QueryRowContext(ctx, q).Scan(&id, &host, &port, &datadir, &started)
	if errNumber(err) == erUnknownSystemVar {
		// A server without the id: the rest still tells servers apart.
		id = "-"
		q = "SELECT @@hostname, @@port, @@datadir, (" + serverStartQuery(s.server) + ")"
		err = s.conn.QueryRowContext(ctx, q).Scan(&host, &port, &datadir, &started)
	}
	if err != nil {
		return "", rm.wrap(opServerKey, xa.XID{}, err)
	}
	return fmt.Sprintf("%s uid=%s host=%s port=%d datadir=%s started=%d", flavor, id, host, port, datadir, started), nil
}

// listedIn reports whether ps lists x.
func listedIn(ps []xa.PreparedBranch, x xa.XID) bool {
	for _, p := range ps {
		if p.XID.Equal(x) {
			return true
		}
	}
	return false
}

// parseRecoverRow turns one XA RECOVER row (formatID, gtrid_length,
// bqual_length, data) into a PreparedBranch. Raw is always set; XID is
// left zero when the row is not a valid xa.XID (a foreign branch with a
// formatID beyond int32, or lengths that do not add up), so that such a
// branch is listed but can never be mistaken for one of ours. A malformed
// row never fails the listing: the other branches, ours among them, must
// still be recovered.
func parseRecoverRow(formatID, gtridLen, bqualLen int64, data []byte) xa.PreparedBranch {
	if gtridLen < 0 || bqualLen < 0 || gtridLen+bqualLen != int64(len(data)) {
		return xa.PreparedBranch{Raw: fmt.Sprintf("malformed XA RECOVER row: formatID %d, gtrid_length %d, bqual_length %d, data X'%x'",
			formatID, gtridLen, bqualLen, data)}
	}
	gtrid := append([]byte(nil), data[:gtridLen]...)
	bqual := append([]byte{}, data[gtridLen:]...)
	p := xa.PreparedBranch{Raw: formatXIDLiteral(formatID, gtrid, bqual)}
	if formatID >= 0 && formatID <= 1<<31-1 {
		x := xa.XID{FormatID: int32(formatID), Gtrid: gtrid, Bqual: bqual}
		if x.Validate() == nil {
			p.XID = x
		}
	}
	return p
}
