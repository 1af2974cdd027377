package sqlsink

import (
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestRefusalClasses: which server errors are refusals of a row's data,
// and the column or constraint read from them (the messages are the
// servers' own, as MariaDB 10.11, MySQL 8 and PostgreSQL 15 send them).
// A missing table or column is never a refusal; a duplicate key only in
// an append table.
func TestRefusalClasses(t *testing.T) {
	tb := &table{Table: Table{Name: "t", Columns: []Column{{Name: "k"}, {Name: "v"}, {Name: "n"}}}}
	up := &table{Table: Table{Name: "t", Upsert: true, Key: []string{"k"}, Columns: tb.Columns}}
	my := func(n uint16, msg string) error {
		return fmt.Errorf("sink: writing 3 rows: %w", &gomysql.MySQLError{Number: n, Message: msg})
	}
	for _, c := range []struct {
		err         error
		upsert      bool
		ok          bool
		col, constr string
	}{
		{my(1406, "Data too long for column 'v' at row 2"), false, true, "v", ""},
		{my(1048, "Column 'v' cannot be null"), false, true, "v", ""},
		{my(1264, "Out of range value for column 'n' at row 1"), false, true, "n", ""},
		{my(1366, "Incorrect integer value: 'abc' for column `db`.`t`.`n` at row 1"), false, true, "n", ""},
		{my(4025, "CONSTRAINT `n_positive` failed for `db`.`t`"), false, true, "", "n_positive"},
		{my(3819, "Check constraint 'n_positive' is violated."), false, true, "", "n_positive"},
		{my(1452, "Cannot add or update a child row: a foreign key constraint fails (`db`.`t`, CONSTRAINT `fk` FOREIGN KEY (`k`) REFERENCES `p` (`k`))"), false, true, "", "fk"},
		{my(1062, "Duplicate entry '1' for key 'PRIMARY'"), false, true, "", "PRIMARY"},
		{my(1062, "Duplicate entry '1' for key 'PRIMARY'"), true, false, "", ""},
		{my(1146, "Table 'db.t' doesn't exist"), false, false, "", ""},
		{my(1054, "Unknown column 'v' in 'field list'"), false, false, "", ""},
		{my(1213, "Deadlock found when trying to get lock"), false, false, "", ""},
		{errors.New("driver: bad connection"), false, false, "", ""},
		// Contention and outages are never the record's fault (a good
		// record must not become a dead letter because the server was
		// busy or down): review of issue 18, item 2.
		{my(1205, "Lock wait timeout exceeded; try restarting transaction"), false, false, "", ""},
		{my(1053, "Server shutdown in progress"), false, false, "", ""},
		{my(1927, "Connection was killed"), false, false, "", ""},
		{my(1317, "Query execution was interrupted"), false, false, "", ""},
		{my(1969, "Query execution was interrupted (max_statement_time exceeded)"), false, false, "", ""},
		{fmt.Errorf("sink: writing 3 rows: %w", gomysql.ErrInvalidConn), false, false, "", ""},
	} {
		tt := tb
		if c.upsert {
			tt = up
		}
		r, ok := myRefusal(c.err, tt.Upsert)
		if ok != c.ok || r.column != c.col || r.constraint != c.constr {
			t.Errorf("myRefusal(%v, upsert %v) = %+v, %v; want column %q, constraint %q, %v", c.err, c.upsert, r, ok, c.col, c.constr, c.ok)
		}
	}
	pg := func(code, col, constr, where string) error {
		return fmt.Errorf("sink: copying: %w", &pgconn.PgError{Code: code, ColumnName: col, ConstraintName: constr, Where: where})
	}
	for _, c := range []struct {
		err         error
		upsert      bool
		ok          bool
		col, constr string
	}{
		{pg("22001", "", "", `COPY t, line 2, column v: "much too long"`), false, true, "v", ""},
		{pg("22001", "", "", ""), true, true, "", ""},
		{pg("23502", "v", "", ""), false, true, "v", ""},
		{pg("23514", "", "n_positive", ""), false, true, "", "n_positive"},
		{pg("23503", "", "fk", ""), false, true, "", "fk"},
		{pg("23505", "", "t_pkey", ""), false, true, "", "t_pkey"},
		{pg("23505", "", "t_pkey", ""), true, false, "", ""},
		{pg("42P01", "", "", ""), false, false, "", ""},
		{pg("42703", "", "", ""), false, false, "", ""},
		{pg("40001", "", "", ""), false, false, "", ""},
		{pg("57014", "", "", ""), false, false, "", ""},
		{pg("40P01", "", "", ""), false, false, "", ""},
		{pg("55P03", "", "", ""), false, false, "", ""},
		{pg("57P01", "", "", ""), false, false, "", ""},
		{pg("08006", "", "", ""), false, false, "", ""},
		{pg("25P02", "", "", ""), false, false, "", ""},
		{pg("53100", "", "", ""), false, false, "", ""},
		{fmt.Errorf("sink: upserting: error preprocessing batch (build): failed to encode args[5]: unable to encode 100000 into binary format for int2 (OID 21)"), true, true, "n", ""},
		{errors.New("conn closed"), false, false, "", ""},
		{nil, false, false, "", ""},
	} {
		tt := tb
		if c.upsert {
			tt = up
		}
		r, ok := pgRefusal(c.err, tt, nil)
		if ok != c.ok || r.column != c.col || r.constraint != c.constr {
			t.Errorf("pgRefusal(%v, upsert %v) = %+v, %v; want column %q, constraint %q, %v", c.err, c.upsert, r, ok, c.col, c.constr, c.ok)
		}
	}
}
