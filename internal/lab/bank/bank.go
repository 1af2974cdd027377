// Package bank is the workload of the demo, the crash tests and the bank
// invariant test: accounts in a MySQL-protocol database and in PostgreSQL,
// and transfers that debit one database and credit the other in one global
// transaction, each writing a ledger row on both sides.
//
// Invariants, checked with direct SQL (never by asking the transaction
// manager): the total balance over both databases never changes; every
// ledger id is in both databases or in neither (atomicity); every transfer
// the coordinator reported committed is in both ledgers; no branch is left
// prepared.
package bank

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"

	_ "github.com/go-sql-driver/mysql" // direct SQL for setup and checks
	"github.com/jackc/pgx/v5"

	xamysql "github.com/xadb/xa/drivers/mysql"
	xapg "github.com/xadb/xa/drivers/postgres"
	"github.com/xadb/xa/xa"
)

// Initial is every account's opening balance.
const Initial = 1000

// Setup creates the tables in both databases and n accounts on each side.
func Setup(ctx context.Context, mysqlDSN, pgDSN string, n int) error {
	my, err := sql.Open("mysql", mysqlDSN)
	if err != nil {
		return err
	}
	defer my.Close()
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE IF NOT EXISTS ledger (id VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL) ENGINE=InnoDB",
		"DELETE FROM accounts", "DELETE FROM ledger",
	} {
		if _, err := my.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("mysql: %s: %w", q, err)
		}
	}
	for i := 0; i < n; i++ {
		if _, err := my.ExecContext(ctx, "INSERT INTO accounts VALUES (?, ?)", i, Initial); err != nil {
			return fmt.Errorf("mysql: %w", err)
		}
	}
	pg, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		return err
	}
	defer pg.Close(context.Background())
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		"CREATE TABLE IF NOT EXISTS ledger (id TEXT PRIMARY KEY, amount BIGINT NOT NULL)",
		"DELETE FROM accounts", "DELETE FROM ledger",
	} {
		if _, err := pg.Exec(ctx, q); err != nil {
			return fmt.Errorf("postgres: %s: %w", q, err)
		}
	}
	if _, err := pg.Exec(ctx, "INSERT INTO accounts SELECT g, $1 FROM generate_series(0, $2) g", Initial, n-1); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// Transfer is one transfer's parameters.
type Transfer struct {
	From, To int   // account ids (From on the debited side)
	Amount   int64 // moved from one database to the other
	// ToPostgres: MySQL is debited and PostgreSQL credited; else the
	// reverse.
	ToPostgres bool
}

// Random returns a random transfer among n accounts.
func Random(r *rand.Rand, n int) Transfer {
	return Transfer{From: r.IntN(n), To: r.IntN(n), Amount: int64(1 + r.IntN(50)), ToPostgres: r.IntN(2) == 0}
}

// Do runs t in tx: the debit, the credit and a ledger row on each side
// (the ledger id is the global transaction id). my and pg are the
// participants (drivers/mysql and drivers/postgres resource managers, or
// wrappers of them).
func Do(ctx context.Context, tx *xa.Tx, my, pg xa.ResourceManager, t Transfer) error {
	s, err := tx.Enlist(ctx, my)
	if err != nil {
		return err
	}
	mc := s.(*xamysql.Conn)
	s, err = tx.Enlist(ctx, pg)
	if err != nil {
		return err
	}
	pc := s.(*xapg.Conn)
	id := tx.ID().String()
	myDelta, pgDelta := t.Amount, -t.Amount
	myAcct, pgAcct := t.To, t.From
	if t.ToPostgres {
		myDelta, pgDelta = -t.Amount, t.Amount
		myAcct, pgAcct = t.From, t.To
	}
	if _, err := mc.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE id = ?", myDelta, myAcct); err != nil {
		return fmt.Errorf("mysql update: %w", err)
	}
	if _, err := mc.ExecContext(ctx, "INSERT INTO ledger VALUES (?, ?)", id, myDelta); err != nil {
		return fmt.Errorf("mysql ledger: %w", err)
	}
	if _, err := pc.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", pgDelta, pgAcct); err != nil {
		return fmt.Errorf("postgres update: %w", err)
	}
	if _, err := pc.Exec(ctx, "INSERT INTO ledger VALUES ($1, $2)", id, pgDelta); err != nil {
		return fmt.Errorf("postgres ledger: %w", err)
	}
	return nil
}

// State is what the databases hold, read with direct SQL.
type State struct {
	Accounts      int   // per side
	MySQLTotal    int64 // sum of balances
	PGTotal       int64
	MySQLLedger   map[string]int64
	PGLedger      map[string]int64
	MySQLPrepared []string // prepared branches (all owners) as listed
	PGPrepared    []string
}

// Total is the sum over both databases.
func (s State) Total() int64 { return s.MySQLTotal + s.PGTotal }

// Read reads the state of both databases. Prepared branches are those
// of transaction-manager node node (all of them when node is ""): XA
// RECOVER lists the whole server's, other tests' and applications'
// included.
func Read(ctx context.Context, mysqlDSN, pgDSN, node string) (State, error) {
	var s State
	my, err := sql.Open("mysql", mysqlDSN)
	if err != nil {
		return s, err
	}
	defer my.Close()
	if err := my.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(balance),0) FROM accounts").Scan(&s.Accounts, &s.MySQLTotal); err != nil {
		return s, fmt.Errorf("mysql: %w", err)
	}
	s.MySQLLedger = map[string]int64{}
	rows, err := my.QueryContext(ctx, "SELECT id, amount FROM ledger")
	if err != nil {
		return s, fmt.Errorf("mysql: %w", err)
	}
	for rows.Next() {
		var id string
		var a int64
		if err := rows.Scan(&id, &a); err != nil {
			rows.Close()
			return s, err
		}
		s.MySQLLedger[id] = a
	}
	rows.Close()
	rows, err = my.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		return s, fmt.Errorf("mysql: XA RECOVER: %w", err)
	}
	for rows.Next() {
		var f, gl, bl int64
		var data []byte
		if err := rows.Scan(&f, &gl, &bl, &data); err != nil {
			rows.Close()
			return s, err
		}
		if gl < 0 || bl < 0 || gl+bl != int64(len(data)) {
			rows.Close()
			return s, fmt.Errorf("mysql: XA RECOVER row with lengths %d+%d for %d bytes", gl, bl, len(data))
		}
		x := xa.XID{FormatID: int32(f), Gtrid: data[:gl], Bqual: data[gl:]}
		if owned(x, node) {
			s.MySQLPrepared = append(s.MySQLPrepared, x.String())
		}
	}
	rows.Close()

	pg, err := pgx.Connect(ctx, pgDSN)
	if err != nil {
		return s, err
	}
	defer pg.Close(context.Background())
	var n int
	if err := pg.QueryRow(ctx, "SELECT COUNT(*), COALESCE(SUM(balance),0)::bigint FROM accounts").Scan(&n, &s.PGTotal); err != nil {
		return s, fmt.Errorf("postgres: %w", err)
	}
	s.PGLedger = map[string]int64{}
	prows, err := pg.Query(ctx, "SELECT id, amount FROM ledger")
	if err != nil {
		return s, fmt.Errorf("postgres: %w", err)
	}
	for prows.Next() {
		var id string
		var a int64
		if err := prows.Scan(&id, &a); err != nil {
			prows.Close()
			return s, err
		}
		s.PGLedger[id] = a
	}
	prows.Close()
	prows, err = pg.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
	if err != nil {
		return s, fmt.Errorf("postgres: %w", err)
	}
	for prows.Next() {
		var gid string
		if err := prows.Scan(&gid); err != nil {
			prows.Close()
			return s, err
		}
		if x, err := xa.ParseXID(gid); node == "" || err == nil && owned(x, node) {
			s.PGPrepared = append(s.PGPrepared, gid)
		}
	}
	prows.Close()
	return s, prows.Err()
}

func owned(x xa.XID, node string) bool {
	g, _, ok := xa.Owned(x)
	return node == "" || ok && g.Node == node
}

// Violation is a broken invariant.
var Violation = errors.New("bank invariant violated")

// Check verifies the invariants of s for n accounts per side, given the
// transfers the coordinator reported committed. It returns every broken
// invariant, each wrapping Violation.
func (s State) Check(n int, committed []string) error {
	var errs []error
	want := int64(2 * n * Initial)
	if s.Total() != want {
		errs = append(errs, fmt.Errorf("%w: total balance %d (mysql %d + postgres %d), want %d", Violation, s.Total(), s.MySQLTotal, s.PGTotal, want))
	}
	var half []string
	for id, a := range s.MySQLLedger {
		if b, ok := s.PGLedger[id]; !ok || a != -b {
			half = append(half, id)
		}
	}
	for id := range s.PGLedger {
		if _, ok := s.MySQLLedger[id]; !ok {
			half = append(half, id)
		}
	}
	if len(half) > 0 {
		sort.Strings(half)
		errs = append(errs, fmt.Errorf("%w: %d transfers committed on one side only: %v", Violation, len(half), first(half, 5)))
	}
	var lost []string
	for _, id := range committed {
		if _, ok := s.MySQLLedger[id]; !ok {
			lost = append(lost, id)
		} else if _, ok := s.PGLedger[id]; !ok {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		errs = append(errs, fmt.Errorf("%w: %d transfers reported committed are missing: %v", Violation, len(lost), first(lost, 5)))
	}
	if len(s.MySQLPrepared)+len(s.PGPrepared) > 0 {
		errs = append(errs, fmt.Errorf("%w: branches left prepared: mysql %v, postgres %v", Violation, first(s.MySQLPrepared, 5), first(s.PGPrepared, 5)))
	}
	return errors.Join(errs...)
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}
