// Command prod-write is an approval-gated production-write CLI. See
// README.md and docs/. It links no network code: a command that needs
// DynamoDB, S3, a bridge or MCP is handed to prod-write-net, installed
// beside it (docs/adr/0010-network-binary.md).
package main

import (
	"os"

	"github.com/prod-write/prod-write/pkg/cli"
)

func main() { os.Exit(cli.Main(nil, nil)) }
