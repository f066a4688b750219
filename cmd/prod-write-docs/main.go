// Command prod-write-docs generates prod-write's man pages from its command
// tree, so help text and man pages cannot disagree. `make man` runs it.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra/doc"

	"github.com/prod-write/prod-write/pkg/cli"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "man" {
		fmt.Fprintln(os.Stderr, "usage: prod-write-docs man DIR")
		os.Exit(64)
	}
	dir := os.Args[2]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "prod-write-docs:", err)
		os.Exit(74)
	}
	root := cli.NewCmdRoot(cli.NewFactory())
	root.DisableAutoGenTag = true
	header := &doc.GenManHeader{Title: "PROD-WRITE", Section: "1", Source: "prod-write " + cli.Version}
	if err := doc.GenManTree(root, header, dir); err != nil {
		fmt.Fprintln(os.Stderr, "prod-write-docs:", err)
		os.Exit(70)
	}
	fmt.Printf("man pages written to %s\n", dir)
}
