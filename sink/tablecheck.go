package sink

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
	// foldCase: column names compare ignoring case (MySQL).
	foldCase bool
}

// TableError says how a table the sink writes does not fit its Table. It
// matches ErrTable.
type TableError struct {
	Target string
	Table  string
	// Missing: the table does not exist, as the sink's statements would
	// look it up.
	Missing bool
	// Columns are the mapped columns the table does not have.
	Columns []string
	// Key is an upsert's Key when no primary key or unique index of the
	// table has exactly these columns; nil otherwise. MySQL's ON
	// DUPLICATE KEY UPDATE without one inserts a row per record (a
	// duplicate, silently); PostgreSQL's ON CONFLICT refuses.
	Key []string
}

// Problem says what is wrong, without naming the target and table.
func (e *TableError) Problem() string {
	if e.Missing {
		return "missing"
	}
	var p []string
	if len(e.Columns) > 0 {
		p = append(p, "no column "+strings.Join(e.Columns, ", "))
	}
	if e.Key != nil {
		p = append(p, fmt.Sprintf("the upsert key (%s) is not a unique key: no primary key or unique index has exactly these columns", strings.Join(e.Key, ", ")))
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
// must exist, have every column of its Columns, and, for an upsert, a
// primary key or unique index on exactly its Key columns (in any order).
// It returns, in the order of tables, a *TableError for each table that
// does not fit and nil for each that does; err is set when the catalogue
// could not be read.
func CheckTables(ctx context.Context, t TargetConfig, tables []Table) ([]*TableError, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	st, err := storeFor(ctx, t)
	if err != nil {
		return nil, err
	}
	defer st.close()
	return checkTables(ctx, st, t.Name, tables)
}

func checkTables(ctx context.Context, st store, target string, tables []Table) ([]*TableError, error) {
	out := make([]*TableError, len(tables))
	for i, tb := range tables {
		sh, err := st.tableShape(ctx, tb.Name)
		if err != nil {
			return nil, fmt.Errorf("sink: target %s: reading the columns and keys of table %s: %w", target, tb.Name, err)
		}
		out[i] = sh.check(target, tb)
	}
	return out, nil
}

// check returns how tb does not fit the table, nil if it does.
func (sh tableShape) check(target string, tb Table) *TableError {
	e := &TableError{Target: target, Table: tb.Name}
	if !sh.exists {
		e.Missing = true
		return e
	}
	has := func(cols []string, name string) bool {
		return slices.ContainsFunc(cols, func(c string) bool { return c == name || sh.foldCase && strings.EqualFold(c, name) })
	}
	for _, c := range tb.Columns {
		if !has(sh.columns, c.Name) {
			e.Columns = append(e.Columns, c.Name)
		}
	}
	if tb.Upsert && !slices.ContainsFunc(sh.uniques, func(u []string) bool {
		if len(u) != len(tb.Key) {
			return false
		}
		for _, k := range tb.Key {
			if !has(u, k) {
				return false
			}
		}
		return true
	}) {
		e.Key = slices.Clone(tb.Key)
	}
	if e.Columns == nil && e.Key == nil {
		return nil
	}
	return e
}

// checkTables checks every table of the sink (CheckTables) and returns the
// errors of those that do not fit, joined (each a *TableError).
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
		var st store
		if name == s.progress {
			st = s.st
		} else {
			var err error
			if st, err = storeFor(ctx, s.targets[name].cfg); err != nil {
				return fmt.Errorf("sink: target %s: checking its tables: %w", name, err)
			}
		}
		tes, err := checkTables(ctx, st, name, tables)
		if st != s.st {
			st.close()
		}
		if err != nil {
			return err
		}
		for _, te := range tes {
			if te != nil {
				errs = append(errs, te)
			}
		}
	}
	return errors.Join(errs...)
}
