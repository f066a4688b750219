package main

import (
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/prod-write/prod-write/pkg/execute"
)

// rootOnlyParent is where rootonlydir makes its directories: below
// /var/lib, which only root can change on a Debian host.
const rootOnlyParent = "/var/lib/prod-write-tests"

// cmdRootOnlyDir sets VAR to a new directory that only root can change,
// nor any directory above it (execute.RootOnly), removed when the script
// ends: a program installed there runs by its path
// (docs/adr/0060-programs-run-by-their-path.md). $WORK is below /tmp,
// which anyone can write, so a program under $WORK runs from its snapshot.
//
//	rootonlydir BIN
func cmdRootOnlyDir(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: rootonlydir VAR")
	}
	ts.Check(os.MkdirAll(rootOnlyParent, 0o755))
	ts.Check(os.Chmod(rootOnlyParent, 0o755))
	dir, err := os.MkdirTemp(rootOnlyParent, "script-")
	ts.Check(err)
	ts.Defer(func() { os.RemoveAll(dir) })
	ts.Check(os.Chmod(dir, 0o755))
	probe := filepath.Join(dir, "probe")
	ts.Check(os.WriteFile(probe, nil, 0o755))
	if err := execute.RootOnly(probe); err != nil {
		ts.Fatalf("rootonlydir: %s is not root-only here: %v", dir, err)
	}
	ts.Check(os.Remove(probe))
	ts.Setenv(args[0], dir)
}
