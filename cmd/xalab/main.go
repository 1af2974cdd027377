// Command xalab is the lab of the xa transaction manager: the demo (a
// coordinator killed with SIGKILL mid-commit, and recovery with xactl) and
// the benchmark. It is not the operator's tool (that is xactl) and carries
// what xactl must not: crash injection, Pebble, the workload. See xalab
// --help.
package main

import (
	"os"

	"github.com/xadb/xa/internal/lab/labcli"
)

func main() { os.Exit(labcli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
