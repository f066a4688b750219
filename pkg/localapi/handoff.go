package localapi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/prod-write/prod-write/pkg/config"
)

// needsNet says why a command needs [Net], or "" if it does not: c posts
// decisions to a bridge and the command posts them.
func needsNet(c *config.Config, posts bool) string {
	if posts && (SlackEnabled(c.Bridge) || GitHubEnabled(c.Bridge)) {
		return "its decisions are posted to Slack or GitHub"
	}
	return ""
}

// needsAWS says why c needs the AWS backends, or "" if it does not.
func needsAWS(c *config.Config) string {
	switch {
	case c.Store.Backend == "dynamodb":
		return "its store is DynamoDB"
	case c.Archive.Bucket != "":
		return "its receipts are archived to S3"
	}
	return ""
}

// HandOff replaces this process with prod-write-net, installed beside it,
// running the same command: used when this build lacks the backends the
// command needs. It is called before the command has read
// input or changed anything, so running it again from the start is exact.
// It returns only on failure.
//
// prod-write is never setuid (docs/DESIGN.md §13: the boundary is the runner
// service), so the binary that takes over gets no privilege the caller
// lacks.
func (f *Env) HandOff(why string) error {
	executable, exec := f.Executable, f.Exec
	if executable == nil {
		executable = os.Executable
	}
	if exec == nil {
		exec = execve
	}
	self, err := executable()
	if err != nil {
		return fmt.Errorf("finding %s: %w", NetBinary, err)
	}
	path := filepath.Join(filepath.Dir(self), NetBinary)
	fail := func(err error) error {
		return &config.Error{Msg: fmt.Sprintf("this command needs %s (%s), installed beside %s (docs/DEPLOYMENT.md)", NetBinary, why, self), Err: err}
	}
	if filepath.Base(self) == NetBinary {
		// A prod-write-net built without its backends would hand the
		// command to itself for ever.
		return fail(errors.New("this build of it has no network backends"))
	}
	if _, err := os.Stat(path); err != nil {
		return fail(err)
	}
	args := append([]string{path}, f.Args...)
	return fail(exec(path, args, os.Environ()))
}

func execve(path string, argv, env []string) error { return syscall.Exec(path, argv, env) }
