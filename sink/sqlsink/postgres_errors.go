package sqlsink

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
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

// pgRefusal says whether err refuses a row for its data: SQLSTATE class 22
// (data exception: too long, out of range, invalid text) or 23 (integrity
// constraint violation: NOT NULL, CHECK, foreign key, and a unique key in
// an append table only), or a value pgx could not encode (*EncodeError
// from a COPY, pgx's "failed to encode args[i]" from a statement).
// It names the column and constraint the server's error carries (its
// column field, or the COPY context "column x"). An undefined table or
// column (42P01, 42703) is not a refusal: that is the target's fault.
func pgRefusal(err error, tb *table, row []any) (refusal, bool) {
	if err == nil {
		return refusal{}, false
	}
	var ee *EncodeError
	if errors.As(err, &ee) {
		return refusal{column: encodedColumn(ee.Reason, tb, row)}, true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		// pgx refuses a value it cannot encode for a statement's
		// parameter before the server sees it: "failed to encode
		// args[7]: unable to encode ..." (args run row by row).
		if m := reArg.FindStringSubmatch(err.Error()); m != nil && strings.Contains(err.Error(), "unable to encode") {
			if i, err := strconv.Atoi(m[1]); err == nil && len(tb.Columns) > 0 {
				return refusal{column: tb.Columns[i%len(tb.Columns)].Name}, true
			}
		}
		return refusal{}, false
	}
	switch {
	case strings.HasPrefix(pe.Code, "22"), strings.HasPrefix(pe.Code, "23") && (pe.Code != pgUnique || !tb.Upsert):
	default:
		return refusal{}, false
	}
	r := refusal{column: pe.ColumnName, constraint: pe.ConstraintName}
	if r.column == "" {
		r.column = nameIn(reColumn, pe.Where)
	}
	return r, true
}

// reArg finds the parameter pgx failed to encode in its message.
var reArg = regexp.MustCompile(`failed to encode args\[(\d+)\]`)

// reOID finds the type pgx failed to encode for in its message ("unable
// to encode 100000 into binary format for int2 (OID 21)").
var reOID = regexp.MustCompile(`\(OID (\d+)\)`)

// encodedColumn returns the column of row whose value pgx cannot encode
// for the type its message names: the only value of the row, among the
// columns of that type's kind, that pgx refuses for that type; "" if
// none or several.
func encodedColumn(reason string, tb *table, row []any) string {
	m := reOID.FindStringSubmatch(reason)
	if m == nil || row == nil {
		return ""
	}
	oid, err := strconv.ParseUint(m[1], 10, 32)
	if err != nil {
		return ""
	}
	tm := pgtype.NewMap()
	var kinds []colKind
	if kp := tb.kinds.Load(); kp != nil {
		kinds = *kp
	}
	want := kindOther
	if t, ok := tm.TypeForOID(uint32(oid)); ok {
		want = kindOf(t.Name)
	}
	col := ""
	for i, v := range row {
		if v == nil || i >= len(tb.Columns) || want != kindOther && i < len(kinds) && kinds[i] != want {
			continue
		}
		if _, err := tm.Encode(uint32(oid), pgtype.BinaryFormatCode, v, nil); err != nil {
			if col != "" {
				return ""
			}
			col = tb.Columns[i].Name
		}
	}
	return col
}
