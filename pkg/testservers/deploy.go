package testservers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Deployment is one prod-write installation made by `init --demo` in a
// directory, driven as a separate process the way a host runs it.
type Deployment struct {
	T   testing.TB
	Bin string
	Dir string
	// Env is the whole environment of every command: nothing of the
	// test's own.
	Env []string
}

// MarkOp is an operation for counting executions: each run of it leaves
// one new file in DIR (mktemp), so the number of files is the number of
// times it ran. It takes one approval, single-use, on either path.
const MarkOp = `
[[operation]]
name = "mark"
description = "leave one new file per execution"
program = "mktemp"
args = ["-p", "{param.dir}", "run.XXXXXX"]
targets = ["production"]
timeout = "30s"
[operation.params.dir]
pattern = "^/[A-Za-z0-9/._-]+$"
`

// NewDeployment runs `init --demo dir` and adds [MarkOp] to the registry.
func NewDeployment(t testing.TB, bin, dir string, env []string) *Deployment {
	t.Helper()
	d := &Deployment{T: t, Bin: bin, Dir: dir, Env: append([]string{"PATH=/usr/bin:/bin", "HOME=" + dir}, env...)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d.Must("init", "--demo", dir)
	d.WriteFile("operations/mark.toml", MarkOp)
	return d
}

// Path joins elem to the deployment's directory.
func (d *Deployment) Path(elem ...string) string {
	return filepath.Join(append([]string{d.Dir}, elem...)...)
}

// WriteFile writes a file under the deployment's directory.
func (d *Deployment) WriteFile(rel, data string) {
	d.T.Helper()
	if err := os.WriteFile(d.Path(rel), []byte(data), 0o644); err != nil {
		d.T.Fatal(err)
	}
}

// SetBackends replaces the [store] section that init wrote (and anything
// after it) in prod-write.toml with toml.
func (d *Deployment) SetBackends(toml string) {
	d.T.Helper()
	path := d.Path("prod-write.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		d.T.Fatal(err)
	}
	i := bytes.Index(b, []byte("\n[store]"))
	if i < 0 {
		d.T.Fatalf("no [store] section in %s:\n%s", path, b)
	}
	if err := os.WriteFile(path, append(b[:i+1], toml...), 0o644); err != nil {
		d.T.Fatal(err)
	}
}

// Result is how one command ended.
type Result struct {
	Args           []string
	Code           int
	Stdout, Stderr string
	Took           time.Duration
}

func (r *Result) String() string {
	return fmt.Sprintf("prod-write %s: exit %d after %s\nstdout: %s\nstderr: %s", strings.Join(r.Args, " "), r.Code, r.Took.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// Command returns the command for prod-write args in the deployment.
func (d *Deployment) Command(args ...string) *exec.Cmd {
	cmd := exec.Command(d.Bin, args...)
	cmd.Dir = d.Dir
	cmd.Env = d.Env
	return cmd
}

// Run runs prod-write args and returns how it ended.
func (d *Deployment) Run(args ...string) *Result {
	cmd := d.Command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := &Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String(), Took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		r.Code = -2
		r.Stderr += "\n(start: " + err.Error() + ")"
	}
	return r
}

// Must runs prod-write args and fails the test unless it exits 0.
func (d *Deployment) Must(args ...string) *Result {
	d.T.Helper()
	r := d.Run(args...)
	if r.Code != 0 {
		d.T.Fatalf("%s", r)
	}
	return r
}

// Expect runs prod-write args and fails the test unless it exits code.
func (d *Deployment) Expect(code int, args ...string) *Result {
	d.T.Helper()
	r := d.Run(args...)
	if r.Code != code {
		d.T.Fatalf("want exit %d, got %s", code, r)
	}
	return r
}

var fpRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// PlanMark plans [MarkOp] for dir as the demo agent and returns the
// fingerprint.
func (d *Deployment) PlanMark(dir string) string {
	d.T.Helper()
	r := d.Must("plan", "mark", "--target", "production", "--param", "dir="+dir, "--key", "keys/agent.key")
	fp := fpRE.FindString(r.Stdout)
	if fp == "" {
		d.T.Fatalf("no fingerprint: %s", r)
	}
	return fp
}

// Approve files a certainty record for fp as smith and approves it as
// alice: one single-use approval.
func (d *Deployment) Approve(fp string) {
	d.T.Helper()
	d.Must("file", fp, "--key", "keys/smith.key", "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high")
	d.Must("decide", fp, "approve", "--key", "keys/alice.key")
}

// Marks counts the files MarkOp left in dir: how many times it ran.
func Marks(t testing.TB, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
