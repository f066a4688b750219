// Command prod-write-cli is prod-write's command tree: every command and
// flag of docs/man/prod-write.1. `prod-write` hands it every command line
// but a run through the runner service (pkg/fastrun); it can also be run
// directly, with the same commands. It links no network code: a command
// that needs DynamoDB, S3, a bridge or MCP is handed to prod-write-net,
// installed beside it (docs/adr/0010-network-binary.md).
package main

import (
	"os"

	"github.com/prod-write/prod-write/pkg/cli"
)

func main() { os.Exit(cli.Main(nil, nil)) }
