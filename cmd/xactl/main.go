// Command xactl inspects and resolves in-doubt XA transactions of the xa
// transaction manager, checks participants, and creates, reads and checks
// the decision log. See xactl --help. The demo and the benchmark are in
// xalab (cmd/xalab).
package main

import (
	"os"

	"github.com/xadb/xa/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
