package sqlsink

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// PostgreSQL SQLSTATEs the sink's own statements tell apart.
const (
	pgNotNull = "23502" // not_null_violation
	pgUnique  = "23505" // unique_violation
	pgNoTable = "42P01" // undefined_table
)

// pgClass says what the sink makes of a PostgreSQL error of one of its own
// statements: the one place where SQLSTATEs become the sink's meaning (the
// two-phase commands' errors are drivers/postgres's: errors.go).
func pgClass(err error) errClass {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return classOther
	}
	switch pe.Code {
	case pgNotNull:
		return classNotNull
	case pgUnique:
		return classDuplicate
	case pgNoTable:
		return classNoTable
	}
	return classOther
}
