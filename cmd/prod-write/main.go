// Command prod-write is an approval-gated production-write CLI. See
// README.md and docs/. It links no AWS SDK: a command whose configuration
// names DynamoDB or S3 is handed to prod-write-aws, installed beside it
// (docs/adr/0009-aws-binary.md).
package main

import (
	"os"

	"github.com/prod-write/prod-write/pkg/cli"
)

func main() { os.Exit(cli.Main(nil)) }
