// Command prod-write-aws is prod-write with the distributed backends linked
// in: the DynamoDB store and the S3 receipt archive (docs/DISTRIBUTED.md).
// prod-write hands it every command whose configuration names them; it can
// also be run directly, with the same commands and flags.
package main

import (
	"os"

	"github.com/prod-write/prod-write/pkg/awsbackend"
	"github.com/prod-write/prod-write/pkg/cli"
)

func main() { os.Exit(cli.Main(awsbackend.Backend{})) }
