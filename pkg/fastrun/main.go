package fastrun

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// TreeBinary is the name of the binary that holds the command tree, which
// `prod-write` hands every command line it does not make itself.
const TreeBinary = "prod-write-cli"

// exitConfig is the exit status of a configuration error (sysexits
// EX_CONFIG): here, an installation without prod-write-cli.
const exitConfig = 78

// Main is `prod-write`: the run call through the runner service when the
// command line is one it can make ([Try]), and otherwise tree, which runs
// the command tree on the same arguments (the installed binary's is
// [ExecTree]; tests run the tree in process). It returns the exit status.
func Main(tree func() int) int {
	e := Env{Args: os.Args[1:], LookupEnv: os.LookupEnv, Getwd: os.Getwd, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	if code, ok := Try(e); ok {
		return code
	}
	return tree()
}

// ExecTree replaces this process with prod-write-cli, installed beside it,
// running the same command line. Nothing has been read or changed before
// it (Try sent nothing), so the command tree starts the command from its
// beginning, exactly as if it had been called. It returns only on failure,
// which it prints: exit 78, the installation is incomplete.
//
// Like prod-write-net's hand-off (pkg/localapi), it grants nothing:
// neither binary is ever setuid (docs/DESIGN.md §13), and the process keeps its
// caller's arguments, environment and descriptors, which are the caller's
// own.
func ExecTree() int {
	return execTree(os.Args[1:], os.Executable, syscall.Exec, os.Stderr)
}

func execTree(args []string, executable func() (string, error), exec func(string, []string, []string) error, stderr io.Writer) int {
	self, err := executable()
	if err != nil {
		self, err = "this binary", fmt.Errorf("finding this binary: %w", err)
	} else {
		path := filepath.Join(filepath.Dir(self), TreeBinary)
		if filepath.Base(self) == TreeBinary {
			// The tree's own binary built as this one would exec
			// itself for ever.
			err = errors.New("it is this binary")
		} else {
			err = exec(path, append([]string{path}, args...), os.Environ())
		}
	}
	PrintFailure(stderr, wantsJSON(args), Failure{Code: "config", Exit: exitConfig,
		Message: fmt.Sprintf("this command needs %s, installed beside %s: %v", TreeBinary, self, err),
		Hint:    "install prod-write, prod-write-cli and prod-write-net together (make install; docs/DEPLOYMENT.md)"})
	return exitConfig
}

// wantsJSON says whether a command line asks for --json, as far as a line
// that was never parsed can tell: its error is then one JSON object.
func wantsJSON(args []string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}
