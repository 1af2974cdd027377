package sqlsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// tableShape is what a target's catalogue says of a table.
type tableShape struct {
	exists  bool
	columns []string
	// uniques holds the key columns of each primary key and unique index
	// that makes whole column values unique (not a prefix, expression,
	// partial or deferrable one).
	uniques [][]string
	// types holds each column's type, in the order of columns: its base
	// type's name, lower case (PostgreSQL: pg_type.typname of the type or
	// of a domain's base type; MySQL: information_schema DATA_TYPE).
	types []string
	// autoInc are the AUTO_INCREMENT columns (MySQL).
	autoInc []string
	// relkind names what the relation is when it is not an ordinary or
	// partitioned table (PostgreSQL: "view", "materialized view", ...);
	// "" for a table.
	relkind string
	// foldCase: column names compare ignoring case (MySQL).
	foldCase bool
	// anyUnique: an upsert matches a row on any unique key of the table,
	// not only the key's (MySQL's ON DUPLICATE KEY UPDATE).
	anyUnique bool
}

// TableError says how a table the sink writes does not fit its Table. It
// matches ErrTable.
type TableError struct {
	Target string
	Table  string
	// Missing: the table does not exist, as the sink's statements would
	// look it up.
	Missing bool
	// Relkind names what the relation is when it is no table: "view",
	// "materialized view", "foreign table", ... (PostgreSQL; COPY and the
	// sink's prepared transactions need an ordinary or partitioned
	// table). The other fields are not set then.
	Relkind string
	// Columns are the mapped columns the table does not have.
	Columns []string
	// Key is an upsert's Key when no primary key or unique index of the
	// table has exactly these columns; nil otherwise. MySQL's ON
	// DUPLICATE KEY UPDATE without one inserts a row per record (a
	// duplicate, silently); PostgreSQL's ON CONFLICT refuses.
	Key []string
	// OtherUniques are the unique keys of a MySQL upsert table besides
	// the key's: ON DUPLICATE KEY UPDATE fires on any of them, so a
	// record with a new key that collides on another unique key would
	// update another key's row (the record lost, silently). A unique key
	// holding an AUTO_INCREMENT column that is not mapped is left out
	// (the insert generates its value: it never collides).
	OtherUniques [][]string
}

// Problem says what is wrong, without naming the target and table.
func (e *TableError) Problem() string {
	if e.Missing {
		return "missing"
	}
	if e.Relkind != "" {
		return "it is a " + e.Relkind + ", not a table: the sink writes ordinary or partitioned tables only (COPY refuses a view)"
	}
	var p []string
	if len(e.Columns) > 0 {
		p = append(p, "no column "+strings.Join(e.Columns, ", "))
	}
	if e.Key != nil {
		p = append(p, fmt.Sprintf("the upsert key (%s) is not a unique key: no primary key or unique index has exactly these columns", strings.Join(e.Key, ", ")))
	}
	if len(e.OtherUniques) > 0 {
		others := make([]string, len(e.OtherUniques))
		for i, u := range e.OtherUniques {
			others[i] = "(" + strings.Join(u, ", ") + ")"
		}
		p = append(p, fmt.Sprintf("it has the unique key %s besides the upsert key: ON DUPLICATE KEY UPDATE fires on any unique key, so a record with a new key could update another key's row", strings.Join(others, ", ")))
	}
	return strings.Join(p, "; ")
}

// Error names the target and table, and says what is wrong.
func (e *TableError) Error() string {
	return fmt.Sprintf("sink: target %s: table %s: %s", e.Target, e.Table, e.Problem())
}

// Unwrap returns ErrTable.
func (e *TableError) Unwrap() error { return ErrTable }

// CheckTables compares tables (those of target t) with t's catalogue: each
// must be a table (PostgreSQL: ordinary or partitioned, no view), have
// every column of its Columns, and, for an upsert, a primary key or unique
// index on exactly its Key columns (in any order); on MySQL an upsert's
// table must have no other unique key (see TableError.OtherUniques).
// It returns, in the order of tables, a *TableError for each table that
// does not fit and nil for each that does; err is set when the catalogue
// could not be read.
func CheckTables(ctx context.Context, t TargetConfig, tables []Table) ([]*TableError, error) {
	var tes []*TableError
	err := withStore(ctx, t, func(st store) error {
		var err error
		tes, _, err = checkTables(ctx, st, t.Name, tables)
		return err
	})
	return tes, err
}

// checkTables returns, in the order of tables, how each does not fit (nil
// if it does) and, for each, the kinds of its mapped columns.
func checkTables(ctx context.Context, st catalogue, target string, tables []Table) ([]*TableError, [][]colKind, error) {
	out := make([]*TableError, len(tables))
	kinds := make([][]colKind, len(tables))
	for i, tb := range tables {
		sh, err := st.tableShape(ctx, tb.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("sink: target %s: reading the columns and keys of table %s: %w", target, tb.Name, err)
		}
		out[i] = sh.check(target, tb)
		kinds[i] = sh.kinds(tb)
	}
	return out, kinds, nil
}

// kinds returns the kinds of tb's columns, in the order of tb.Columns
// (kindOther for a column the table lacks).
func (sh tableShape) kinds(tb Table) []colKind {
	out := make([]colKind, len(tb.Columns))
	for i, c := range tb.Columns {
		if j := sh.column(c.Name); j >= 0 && j < len(sh.types) {
			out[i] = kindOf(sh.types[j])
		}
	}
	return out
}

// column returns the index of the table's column name, -1 if none.
func (sh tableShape) column(name string) int {
	return slices.IndexFunc(sh.columns, func(c string) bool { return sh.same(c, name) })
}

// same says whether two column names name one column.
func (sh tableShape) same(a, b string) bool { return a == b || sh.foldCase && strings.EqualFold(a, b) }

// check returns how tb does not fit the table, nil if it does.
func (sh tableShape) check(target string, tb Table) *TableError {
	e := &TableError{Target: target, Table: tb.Name}
	if !sh.exists {
		e.Missing = true
		return e
	}
	if sh.relkind != "" {
		e.Relkind = sh.relkind
		return e
	}
	has := func(cols []string, name string) bool {
		return slices.ContainsFunc(cols, func(c string) bool { return sh.same(c, name) })
	}
	for _, c := range tb.Columns {
		if !has(sh.columns, c.Name) {
			e.Columns = append(e.Columns, c.Name)
		}
	}
	isKey := func(u []string) bool {
		if len(u) != len(tb.Key) {
			return false
		}
		for _, k := range tb.Key {
			if !has(u, k) {
				return false
			}
		}
		return true
	}
	if tb.Upsert && !slices.ContainsFunc(sh.uniques, isKey) {
		e.Key = slices.Clone(tb.Key)
	}
	if tb.Upsert && sh.anyUnique {
		// A unique key holding every key column collides only where the
		// key does: on the same row.
		covers := func(u []string) bool {
			for _, k := range tb.Key {
				if !has(u, k) {
					return false
				}
			}
			return true
		}
		for _, u := range sh.uniques {
			if isKey(u) || covers(u) || slices.ContainsFunc(u, func(c string) bool {
				return has(sh.autoInc, c) && !slices.ContainsFunc(tb.Columns, func(m Column) bool { return sh.same(m.Name, c) })
			}) {
				continue
			}
			e.OtherUniques = append(e.OtherUniques, slices.Clone(u))
		}
	}
	if e.Columns == nil && e.Key == nil && e.OtherUniques == nil {
		return nil
	}
	return e
}

// checkTables checks every table of the sink (CheckTables) and returns the
// errors of those that do not fit, joined (each a *TableError); it records
// the kinds of the columns of each table that fits, by which the rows
// written to it are converted (table.fit).
func (s *Sink) checkTables(ctx context.Context) error {
	byTarget := map[string][]Table{}
	for _, tb := range s.tables {
		byTarget[tb.Target] = append(byTarget[tb.Target], tb.Table)
	}
	var errs []error
	for _, name := range s.names {
		tables := byTarget[name]
		if len(tables) == 0 {
			continue
		}
		slices.SortFunc(tables, func(a, b Table) int { return strings.Compare(a.id(), b.id()) })
		tes, kinds, err := checkTables(ctx, s.stores[name], name, tables)
		if err != nil {
			return err
		}
		for i, te := range tes {
			if te != nil {
				errs = append(errs, te)
				continue
			}
			s.tables[tables[i].id()].kinds.Store(&kinds[i])
		}
	}
	return errors.Join(errs...)
}
