// Command prod-write-docs generates prod-write's man pages: section 1 from
// its command tree, so help text and man pages cannot disagree, and
// prod-write.toml(5) from docs/CONFIG.md. `make man` runs it from the
// repository's root.
package main

import (
	"fmt"
	"os"
	"path/filepath"

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
	md, err := os.ReadFile(filepath.Join("docs", "CONFIG.md"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "prod-write-docs:", err)
		os.Exit(66)
	}
	if err := os.WriteFile(filepath.Join(dir, "prod-write.toml.5"), configMan(md, cli.Version), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "prod-write-docs:", err)
		os.Exit(74)
	}
	fmt.Printf("man pages written to %s\n", dir)
}
