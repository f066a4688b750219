// Command prod-write-docs generates prod-write's man pages: section 1 from
// its command tree, so help text and man pages cannot disagree, with the
// EXIT STATUS, ENVIRONMENT and FILES of prod-write(1) from the code that
// defines them, and prod-write.toml(5) from docs/CONFIG.md. `make man`
// runs it from the repository's root.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra/doc"

	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/version"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "man" {
		fmt.Fprintln(os.Stderr, "usage: prod-write-docs man DIR")
		os.Exit(64)
	}
	if err := generate(os.Args[2], "."); err != nil {
		fmt.Fprintln(os.Stderr, "prod-write-docs:", err)
		var pe *fs.PathError
		if errors.As(err, &pe) {
			os.Exit(74)
		}
		os.Exit(70)
	}
	fmt.Printf("man pages written to %s\n", os.Args[2])
}

// generate writes every man page into dir, reading docs/CONFIG.md under
// the repository's root.
func generate(dir, root string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man page directory: %w", err)
	}
	cmd := cli.NewCmdRoot(cli.NewFactory())
	cmd.DisableAutoGenTag = true
	header := &doc.GenManHeader{Title: "PROD-WRITE", Section: "1", Source: "prod-write " + version.Version}
	if err := doc.GenManTree(cmd, header, dir); err != nil {
		return fmt.Errorf("section 1: %w", err)
	}
	rootPage := filepath.Join(dir, "prod-write.1")
	page, err := os.ReadFile(rootPage)
	if err != nil {
		return fmt.Errorf("prod-write(1): %w", err)
	}
	if page, err = rootSections(page); err != nil {
		return fmt.Errorf("prod-write(1): %w", err)
	}
	if err := os.WriteFile(rootPage, page, 0o644); err != nil {
		return fmt.Errorf("prod-write(1): %w", err)
	}
	md, err := os.ReadFile(filepath.Join(root, "docs", "CONFIG.md"))
	if err != nil {
		return fmt.Errorf("prod-write.toml(5): %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prod-write.toml.5"), configMan(md, version.Version), 0o644); err != nil {
		return fmt.Errorf("prod-write.toml(5): %w", err)
	}
	return nil
}
