package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xadb/xa/xa"
)

// mysqlDriverConn is the method set of go-sql-driver's connection that
// database/sql uses. drvConn embeds it so that database/sql finds every
// optional interface it finds on the driver's own connection.
type mysqlDriverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// drvConn is one physical connection of the RM's pool: go-sql-driver's
// connection plus what this package learns about it once, when it is made.
// A branch reaches it through sql.Conn.Raw.
type drvConn struct {
	mysqlDriverConn

	// id is the server's CONNECTION_ID() of this session.
	id uint64
	// server is what the server said about itself on this connection.
	server serverInfo

	// xa is set while an XA branch may be attached to the session (from
	// just before XA START until the branch ended cleanly). Such a
	// connection is never handed out again: ResetSession and IsValid
	// refuse it, so database/sql closes it. Branches discard such
	// sessions explicitly; this is the safety net.
	xa atomic.Bool
	// cleanAt is when the session was last released with no branch on it,
	// on the server's clock (a lower bound, Unix nanoseconds; 0 never).
	cleanAt atomic.Int64
	// clock relates this process's clock to the server's.
	clock serverClock
	// dialed is the local time before the connection was dialed.
	dialed time.Time
	// started is the second in which the server started (see
	// serverStartQuery).
	started int64
	// sock is the connection's socket when the RM dialled it (see dial),
	// else nil: closing it is how a statement whose KILL QUERY could not
	// be delivered is cut off (see guard).
	sock net.Conn

	rm *RM
}

// Close closes the connection and forgets it.
func (c *drvConn) Close() error {
	c.rm.conns.CompareAndDelete(c.id, c)
	return c.mysqlDriverConn.Close()
}

// ResetSession refuses a connection that may still carry an XA branch.
func (c *drvConn) ResetSession(ctx context.Context) error {
	if c.xa.Load() {
		return driver.ErrBadConn
	}
	return c.mysqlDriverConn.ResetSession(ctx)
}

// IsValid reports false for a connection that may still carry an XA branch,
// so that database/sql closes it instead of pooling it.
func (c *drvConn) IsValid() bool {
	return !c.xa.Load() && c.mysqlDriverConn.IsValid()
}

// serverClock relates the local clock to the server's, from one reading of
// the server's @@timestamp taken when the connection was made: at was read
// on the server between the local times sent and got. Later server times
// are estimated from the local clock's elapsed time (Go's monotonic
// reading), so a step of the local wall clock does not move them, and the
// error is the connection's first round trip plus the drift of the two
// clocks' rates.
type serverClock struct {
	at        time.Time // the server's @@timestamp
	sent, got time.Time // local times around the reading
}

// high returns a server time no earlier than the server's clock at local
// time now.
func (c serverClock) high(now time.Time) time.Time { return c.at.Add(now.Sub(c.sent)) }

// low returns a server time no later than the server's clock at local time
// now.
func (c serverClock) low(now time.Time) time.Time { return c.at.Add(now.Sub(c.got)) }

// serverInfo is what a connection learns about its server.
type serverInfo struct {
	version string // VERSION()
	mariaDB bool
	major   int
	minor   int
	patch   int
	// detachOnPrepare: MySQL 8.0.29+ with xa_detach_on_prepare=ON
	// detaches a prepared branch from its session at XA PREPARE.
	detachOnPrepare bool
}

// parseVersion fills the version fields from a VERSION() string such as
// "10.11.19-MariaDB-0+deb12u1" or "8.0.36".
func parseVersion(v string) serverInfo {
	si := serverInfo{version: v}
	si.mariaDB = containsFold(v, "mariadb")
	nums := [3]int{}
	i := 0
	for part := range 3 {
		start := i
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
		n, _ := strconv.Atoi(v[start:i])
		nums[part] = n
		if i >= len(v) || v[i] != '.' {
			break
		}
		i++
	}
	si.major, si.minor, si.patch = nums[0], nums[1], nums[2]
	return si
}

// atLeast reports whether the server version is at least major.minor.patch.
func (si serverInfo) atLeast(major, minor, patch int) bool {
	if si.major != major {
		return si.major > major
	}
	if si.minor != minor {
		return si.minor > minor
	}
	return si.patch >= patch
}

// flavor returns "MariaDB" or "MySQL".
func (si serverInfo) flavor() string {
	if si.mariaDB {
		return "MariaDB"
	}
	return "MySQL"
}

// connector makes the RM's connections: go-sql-driver's connector, then
// one query to learn the session's id, the server's version and clock (and,
// on MySQL 8.0.29+, a second one for xa_detach_on_prepare).
type connector struct {
	inner driver.Connector
	rm    *RM
}

func (c *connector) Driver() driver.Driver { return c.inner.Driver() }

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dialed := c.rm.now()
	var sock dialedSocket
	dc, err := c.inner.Connect(context.WithValue(ctx, dialedSocket{}, &sock))
	if err != nil {
		return nil, err
	}
	mc, ok := dc.(mysqlDriverConn)
	if !ok {
		dc.Close()
		return nil, fmt.Errorf("mysql: connection %T lacks an interface this package needs (%s): "+
			"a Config.Connector wrapper must keep go-sql-driver's", dc, missingInterfaces(dc))
	}
	w := &drvConn{mysqlDriverConn: mc, rm: c.rm, dialed: dialed, sock: sock.conn}
	// One round trip on MariaDB; MySQL 8 has its status in
	// performance_schema and takes a second one.
	// The identity columns (identity.go) ride along.
	idCols := c.rm.identityColumns()
	sent := c.rm.now()
	row, err := queryRow(ctx, mc, "SELECT CONNECTION_ID(), VERSION(), @@timestamp, ("+serverStartQuery(serverInfo{mariaDB: true})+")"+idCols)
	got := c.rm.now()
	if n := errNumber(err); n != 0 && n != erNoSuchTable {
		sent = c.rm.now()
		row, err = queryRow(ctx, mc, "SELECT CONNECTION_ID(), VERSION(), @@timestamp, ("+serverStartQuery(serverInfo{})+")"+idCols)
		got = c.rm.now()
	}
	if errNumber(err) == erNoSuchTable {
		mc.Close()
		var want xa.StoreIdentity
		if p := c.rm.ident.Load(); p != nil {
			want = *p
		}
		return nil, &xa.IdentityError{Store: fmt.Sprintf("participant %q", c.rm.name), Expected: want,
			Why: "a new session reached a database without the participant's identity table: " + err.Error(),
			Fix: "check the DSN (host, port, database) and restart"}
	}
	if err != nil {
		mc.Close()
		return nil, err
	}
	if err := c.rm.checkSessionIdentity(ctx, mc, row, 4); err != nil {
		mc.Close()
		return nil, err
	}
	w.id, err = asUint(row[0])
	if err == nil {
		w.started, err = asInt(row[3])
	}
	if err != nil {
		mc.Close()
		return nil, err
	}
	w.server = parseVersion(asString(row[1]))
	at, err := asUnixTime(row[2])
	if err != nil {
		mc.Close()
		return nil, err
	}
	w.clock = serverClock{at: at, sent: sent, got: got}
	if !w.server.mariaDB && w.server.atLeast(8, 0, 29) {
		// MySQL 8 only: the variable exists from 8.0.29 and may be set
		// per session.
		row, err := queryRow(ctx, mc, "SELECT @@SESSION.xa_detach_on_prepare")
		if err != nil {
			mc.Close()
			return nil, err
		}
		on, _ := asUint(row[0])
		w.server.detachOnPrepare = on == 1
	}
	c.rm.conns.Store(w.id, w)
	return w, nil
}

// dialedSocket is where dial leaves the socket it made for the Connect
// whose context carries it (as its own key).
type dialedSocket struct{ conn net.Conn }

// dialNetworks are the networks dial makes sockets for: go-sql-driver's
// own, which it dials itself unless given a DialFunc.
var dialNetworks = map[string]bool{"tcp": true, "tcp4": true, "tcp6": true, "unix": true}

// dial is the RM's sessions' gomysql.Config.DialFunc: it dials as
// go-sql-driver does by default and leaves the socket with the Connect
// that asked (through a Config.Connector wrapper too, which passes the
// context on), so that the guard can close it.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err == nil {
		if ds, ok := ctx.Value(dialedSocket{}).(*dialedSocket); ok {
			ds.conn = c
		}
	}
	return c, err
}

// queryRow runs a query without arguments on a driver connection and
// returns its first row.
func queryRow(ctx context.Context, c driver.QueryerContext, query string) ([]driver.Value, error) {
	rows, err := c.QueryContext(ctx, query, nil)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(dest); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &noRowError{query: query}
		}
		return nil, err
	}
	return dest, nil
}

// noRowError: a query that should return a row returned none.
type noRowError struct{ query string }

func (e *noRowError) Error() string { return fmt.Sprintf("mysql: %s returned no row", e.query) }

func asUint(v driver.Value) (uint64, error) {
	switch x := v.(type) {
	case int64:
		return uint64(x), nil
	case uint64:
		return x, nil
	case []byte:
		return strconv.ParseUint(string(x), 10, 64)
	case string:
		return strconv.ParseUint(x, 10, 64)
	}
	return 0, fmt.Errorf("mysql: unexpected value %v (%T), want an integer", v, v)
}

func asInt(v driver.Value) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case []byte, string:
		return strconv.ParseInt(asString(x), 10, 64)
	}
	return 0, fmt.Errorf("mysql: unexpected value %v (%T), want an integer", v, v)
}

// asUnixTime converts a Unix time in seconds with a fraction (@@timestamp)
// to a time.
func asUnixTime(v driver.Value) (time.Time, error) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case []byte, string:
		var err error
		if f, err = strconv.ParseFloat(asString(x), 64); err != nil {
			return time.Time{}, fmt.Errorf("mysql: unexpected time %q: %w", asString(x), err)
		}
	default:
		return time.Time{}, fmt.Errorf("mysql: unexpected time %v (%T)", v, v)
	}
	sec := math.Floor(f)
	return time.Unix(int64(sec), int64(math.Round((f-sec)*1e6))*1e3), nil
}

func asString(v driver.Value) string {
	switch x := v.(type) {
	case []byte:
		return string(x)
	case string:
		return x
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// containsFold reports whether s contains the ASCII lower-case word w,
// ignoring ASCII case, without allocating.
func containsFold(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		j := 0
		for ; j < len(w); j++ {
			c := s[i+j]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != w[j] {
				break
			}
		}
		if j == len(w) {
			return true
		}
	}
	return false
}

// missingInterfaces names the interfaces of mysqlDriverConn that c lacks.
func missingInterfaces(c driver.Conn) string {
	var out []string
	check := func(name string, ok bool) {
		if !ok {
			out = append(out, name)
		}
	}
	_, ok := c.(driver.ConnBeginTx)
	check("ConnBeginTx", ok)
	_, ok = c.(driver.ConnPrepareContext)
	check("ConnPrepareContext", ok)
	_, ok = c.(driver.ExecerContext)
	check("ExecerContext", ok)
	_, ok = c.(driver.QueryerContext)
	check("QueryerContext", ok)
	_, ok = c.(driver.Pinger)
	check("Pinger", ok)
	_, ok = c.(driver.SessionResetter)
	check("SessionResetter", ok)
	_, ok = c.(driver.Validator)
	check("Validator", ok)
	_, ok = c.(driver.NamedValueChecker)
	check("NamedValueChecker", ok)
	return strings.Join(out, ", ")
}
