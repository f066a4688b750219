// Command prod-write is an approval-gated production-write CLI. See
// README.md and docs/. This binary is small: it makes an agent's run
// through the runner service itself, and hands every other command line to
// prod-write-cli, installed beside it, which holds the command tree
// (pkg/fastrun, docs/adr/0057-a-small-run-client.md).
package main

import (
	"os"

	"github.com/prod-write/prod-write/pkg/fastrun"
)

func main() { os.Exit(fastrun.Main(fastrun.ExecTree)) }
