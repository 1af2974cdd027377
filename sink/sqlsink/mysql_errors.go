package sqlsink

import (
	"errors"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
)

// MySQL and MariaDB error numbers the sink's own statements tell apart.
const (
	myBadNull  = 1048 // ER_BAD_NULL_ERROR
	myDupEntry = 1062 // ER_DUP_ENTRY
	myNoTable  = 1146 // ER_NO_SUCH_TABLE
	myLockWait = 1205 // ER_LOCK_WAIT_TIMEOUT
	myDeadlock = 1213 // ER_LOCK_DEADLOCK
)

// myRefusals are the errors by which MySQL/MariaDB refuse a row for its
// data, in a strict session (the sink's): the statement is undone, the
// transaction goes on (docs/xa-facts.md, fact 21). A missing table or
// column (1146, 1054) is not among them: that is the target's fault, not
// the record's.
var myRefusals = map[uint16]bool{
	1048: true, // ER_BAD_NULL_ERROR: Column 'x' cannot be null
	1263: true, // ER_WARN_NULL_TO_NOTNULL
	1264: true, // ER_WARN_DATA_OUT_OF_RANGE: Out of range value for column 'x'
	1265: true, // WARN_DATA_TRUNCATED: Data truncated for column 'x'
	1292: true, // ER_TRUNCATED_WRONG_VALUE: Incorrect datetime value ... for column 'x'
	1366: true, // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: Incorrect integer value ... for column 'x'
	1406: true, // ER_DATA_TOO_LONG: Data too long for column 'x'
	1411: true, // ER_WRONG_VALUE_FOR_TYPE
	1451: true, // ER_ROW_IS_REFERENCED_2 (a foreign key)
	1452: true, // ER_NO_REFERENCED_ROW_2 (a foreign key)
	1690: true, // ER_DATA_OUT_OF_RANGE
	3819: true, // ER_CHECK_CONSTRAINT_VIOLATED (MySQL 8)
	4025: true, // ER_CONSTRAINT_FAILED (MariaDB: CONSTRAINT `c` failed for `db`.`t`)
}

// myRefusal says whether err refuses a row for its data, and names the
// column and constraint the server's message names. A duplicate key (1062)
// is a refusal in an append table only: an upsert table's key cannot
// collide, and a collision there is not the record's fault.
func myRefusal(err error, upsert bool) (refusal, bool) {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || !(myRefusals[me.Number] || me.Number == myDupEntry && !upsert) {
		return refusal{}, false
	}
	r := refusal{column: nameIn(reColumn, me.Message), constraint: nameIn(reConstraint, me.Message)}
	if me.Number == myDupEntry {
		// Duplicate entry 'v' for key 'name'
		if i := strings.LastIndex(me.Message, " for key "); i >= 0 {
			r.constraint = strings.Trim(me.Message[i+len(" for key "):], "'`")
		}
	}
	return r, true
}

// myClass says what the sink makes of a MySQL/MariaDB error of one of its
// own statements: the one place where their numbers become the sink's
// meaning (the XA statements' errors are drivers/mysql's: errors.go).
func myClass(err error) errClass {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return classOther
	}
	switch me.Number {
	case myBadNull:
		return classNotNull
	case myDupEntry:
		return classDuplicate
	case myLockWait, myDeadlock:
		return classContention
	case myNoTable:
		return classNoTable
	}
	return classOther
}
