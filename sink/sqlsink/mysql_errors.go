package sqlsink

import (
	"errors"

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
