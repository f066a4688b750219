// Command prod-write-net is prod-write with its network code linked in: the
// DynamoDB store and the S3 receipt archive (docs/DISTRIBUTED.md), the
// Slack and GitHub bridges (docs/BRIDGES.md) and the MCP server
// (docs/AGENTS.md). prod-write hands it every command that needs them; it
// can also be run directly, with the same commands and flags
// (docs/adr/0010-network-binary.md).
package main

import (
	"os"

	"github.com/prod-write/prod-write/pkg/awsbackend"
	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/netbackend"
)

func main() { os.Exit(cli.Main(awsbackend.Backend{}, netbackend.Backend{})) }
