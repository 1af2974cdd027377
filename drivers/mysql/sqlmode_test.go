package mysql

import (
	"context"
	"testing"

	"github.com/xadb/xa/internal/testrig/dbtest"
	"github.com/xadb/xa/xa"
)

// TestSQLModeFinding: the start-up check (which xactl doctor reports for
// every MySQL participant and sink target) warns, with the fix, about a
// server whose global sql_mode is not strict (issue 18, item 3): a
// private MariaDB started with sql_mode=” is reported, the shared test
// server (MariaDB's default mode, strict) is not.
func TestSQLModeFinding(t *testing.T) {
	for mode, want := range map[string]xa.Severity{
		"":                       xa.SeverityWarn,
		"NO_ENGINE_SUBSTITUTION": xa.SeverityWarn,
		"STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION": xa.SeverityOK,
		"no_engine_substitution,strict_all_tables":   xa.SeverityOK,
	} {
		if f := sqlModeFinding(mode); f.Severity != want || (want == xa.SeverityWarn) != (f.Fix != "") {
			t.Errorf("sql_mode %q: %+v, want %v", mode, f, want)
		}
	}
	ctx := context.Background()
	srv := dbtest.NewMySQLServer(t, dbtest.Setting("sql_mode", ""))
	db := srv.CreateDB(t)
	fs, err := openRM(t, db.DSN()).Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := findings(t, fs)["sql_mode"]; f.Severity != xa.SeverityWarn || f.Fix == "" {
		t.Errorf("a server with sql_mode '': %+v; want a warning with the fix", f)
	}
	shared, _ := setup(t)
	fs, err = openRM(t, shared.DSN()).Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := findings(t, fs)["sql_mode"]; f.Severity != xa.SeverityOK {
		t.Errorf("the shared test server: %+v; want its strict default reported OK", f)
	}
}
