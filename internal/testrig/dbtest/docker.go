package dbtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// Images used where a Docker engine answers. MySQL 8.4 brings the MySQL 8
// behaviours MariaDB lacks (detach on prepare, XA_RECOVER_ADMIN).
const (
	mysqlImage    = "mysql:8.4"
	postgresImage = "postgres:16"
)

var (
	dockerOnce sync.Once
	dockerOK   bool
)

// useDocker reports whether servers come from testcontainers: XA_DBTEST
// chooses ("docker" or "local"); unset, a Docker engine that answers a ping
// within a few seconds is used.
func useDocker() bool {
	switch os.Getenv("XA_DBTEST") {
	case "docker":
		return true
	case "local":
		return false
	}
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		defer func() {
			if recover() != nil { // the provider panics on some broken setups
				dockerOK = false
			}
		}()
		p, err := testcontainers.NewDockerProvider()
		if err != nil {
			return
		}
		defer p.Close()
		dockerOK = p.Health(ctx) == nil
	})
	return dockerOK
}

// containerServer is a server in a container with a fixed host port, so
// that a restart keeps its address.
type containerServer struct {
	c   testcontainers.Container
	srv *Server
}

func startContainer(ctx context.Context, k Kind, settings map[string]string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := &Server{Kind: k, Host: "127.0.0.1", Port: port}
	var inner string
	var c testcontainers.Container
	var args []string
	for _, name := range sortedKeys(settings) {
		if k == MySQL {
			args = append(args, "--"+name+"="+settings[name])
		} else {
			args = append(args, "-c", name+"="+settings[name])
		}
	}
	switch k {
	case MySQL:
		inner = "3306/tcp"
		srv.Flavor, srv.user, srv.pass = "mysql", "root", "xa"
		c, err = tcmysql.Run(ctx, mysqlImage,
			testcontainers.WithEnv(map[string]string{"MYSQL_ROOT_PASSWORD": srv.pass}),
			tcmysql.WithPassword(srv.pass),
			testcontainers.WithCmdArgs(append([]string{"--max-connections=600"}, args...)...),
			fixedPort(inner, port))
	case Postgres:
		inner = "5432/tcp"
		srv.Flavor, srv.user, srv.pass = "postgres", "postgres", "xa"
		if _, ok := settings["max_prepared_transactions"]; !ok {
			args = append(args, "-c", "max_prepared_transactions=200")
		}
		c, err = tcpostgres.Run(ctx, postgresImage,
			tcpostgres.WithUsername(srv.user), tcpostgres.WithPassword(srv.pass),
			testcontainers.WithCmdArgs(append([]string{"-c", "max_connections=300"}, args...)...),
			fixedPort(inner, port),
			tcpostgres.BasicWaitStrategies())
	}
	if err != nil {
		return nil, fmt.Errorf("testcontainers %s: %w", k, err)
	}
	cs := &containerServer{c: c, srv: srv}
	srv.ctl = cs
	return srv, nil
}

func fixedPort(inner string, port int) testcontainers.CustomizeRequestOption {
	return testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		if hc.PortBindings == nil {
			hc.PortBindings = network.PortMap{}
		}
		hc.PortBindings[network.MustParsePort(inner)] = []network.PortBinding{{
			HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port),
		}}
	})
}

func (cs *containerServer) stop(ctx context.Context) error {
	d := 30 * time.Second
	return cs.c.Stop(ctx, &d)
}

func (cs *containerServer) kill(ctx context.Context) error {
	// A zero stop timeout makes Docker send SIGKILL at once.
	d := time.Duration(0)
	return cs.c.Stop(ctx, &d)
}

func (cs *containerServer) start(ctx context.Context) error {
	if err := cs.c.Start(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := cs.srv.Exec(pctx, "", "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("container did not accept connections in 90s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (cs *containerServer) destroy() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = testcontainers.TerminateContainer(cs.c, testcontainers.StopContext(ctx))
}

func (cs *containerServer) logTail() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cs.c.Logs(ctx)
	if err != nil {
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "container log tail:\n" + string(b)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
