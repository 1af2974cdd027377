// Command xactl inspects and resolves in-doubt XA transactions of the xa
// transaction manager, checks participants, reads the decision log, and
// runs the demo and the benchmark. See xactl --help.
package main

import (
	"os"

	"github.com/xadb/xa/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
