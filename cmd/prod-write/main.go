// Command prod-write is an approval-gated production-write CLI. See
// README.md and docs/.
package main

import (
	"os"

	"github.com/prod-write/prod-write/pkg/cli"
)

func main() { os.Exit(cli.Main()) }
