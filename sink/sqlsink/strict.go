package sqlsink

import (
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"
)

// strictSQLMode is the session sql_mode of the sink's MySQL/MariaDB
// sessions: the server's (or the DSN's) with STRICT_ALL_TABLES added.
// Without it a value a column cannot hold is changed, not refused: "abc"
// into INT is stored as 0, 50 characters into VARCHAR(10) as the first
// 10, a missing NOT NULL value as the empty string (docs/sink.md, "Nothing changed
// silently"). CONCAT_WS skips the NULL that an empty mode becomes, so an
// empty mode gives 'STRICT_ALL_TABLES' and not a leading comma.
func strictSQLMode(base string) string {
	return fmt.Sprintf("CONCAT_WS(',', NULLIF(%s, ''), 'STRICT_ALL_TABLES')", base)
}

// strictDSN returns dsn with its sessions' sql_mode strict: the driver
// sets the mode on every connection it opens (a DSN parameter that is a
// system variable is SET at connect), as the DSN's own sql_mode, if it
// has one, with STRICT_ALL_TABLES added, else as the server's default
// with it added. It changes nothing else, and nothing for any other
// client of the server.
func strictDSN(dsn string) (string, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	base := "@@GLOBAL.sql_mode"
	if v, ok := cfg.Params["sql_mode"]; ok {
		base = v
		if base == "" {
			base = "''"
		}
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["sql_mode"] = strictSQLMode(base)
	return cfg.FormatDSN(), nil
}
