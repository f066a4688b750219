// Package runtest drives the real prod-write binary, built with the
// failpoints tag, through the situations docs/DESIGN.md §6 makes promises about: a
// crash or kill -9 at any point, many concurrent runs, and a caller who
// tries to slip something past the gate.
//
// TestMain builds two programs once: prod-write itself (with failpoints, so
// $PROD_WRITE_FAILPOINT can SIGKILL it at a named point) and pwhelper, a
// tiny static program the test operations run, which leaves evidence that
// it ran (a line appended to a file, its argv, its environment).
package runtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prod-write/prod-write/receipts"
)

var (
	prodWrite string // the failpoints build of prod-write
	helper    string // pwhelper
)

// helperSource is the program the test operations run. It never uses a
// shell; every mode leaves something the tests can look for.
const helperSource = `package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if _, err := f.Write([]byte(line + "\n")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	f.Close()
}

func main() {
	if len(os.Args) < 2 {
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "append": // append FILE TEXT
		appendLine(args[0], args[1])
	case "mark-sleep": // mark-sleep FILE MILLISECONDS: mark first, then sleep
		appendLine(args[0], strconv.Itoa(os.Getpid()))
		ms, _ := strconv.Atoi(args[1])
		time.Sleep(time.Duration(ms) * time.Millisecond)
	case "argv": // argv FILE ARG...: record the exact argv as JSON
		b, _ := json.Marshal(os.Args)
		os.WriteFile(args[0], b, 0o644)
	case "environ": // environ FILE: record the exact environment as JSON
		b, _ := json.Marshal(os.Environ())
		os.WriteFile(args[0], b, 0o644)
	case "spawn": // spawn FILE: start a sleeping child in our group, record both pids, sleep
		c := exec.Command("/bin/sleep", "30")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		appendLine(args[0], fmt.Sprintf("%d %d", os.Getpid(), c.Process.Pid))
		time.Sleep(30 * time.Second)
	case "exit": // exit CODE
		n, _ := strconv.Atoi(args[0])
		os.Exit(n)
	case "kill-self": // kill-self SIGNUM
		n, _ := strconv.Atoi(args[0])
		syscall.Kill(os.Getpid(), syscall.Signal(n))
		time.Sleep(5 * time.Second)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", strings.Join(os.Args, " "))
		os.Exit(2)
	}
}
`

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "prod-write-runtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		if err := build(dir); err != nil {
			fmt.Fprintln(os.Stderr, "runtest:", err)
			return 1
		}
		return m.Run()
	}()
	os.RemoveAll(dir)
	os.Exit(code)
}

func build(dir string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("not inside the prod-write module")
	}
	root := filepath.Dir(gomod)
	prodWrite = filepath.Join(dir, "prod-write")
	// prod-write hands every command but a run through the service to
	// prod-write-cli beside it (docs/adr/0057-a-small-run-client.md).
	cmd := exec.Command("go", "build", "-tags", "failpoints", "-o", dir+"/", "./cmd/prod-write", "./cmd/prod-write-cli")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building prod-write: %v\n%s", err, out)
	}
	src := filepath.Join(dir, "helper", "main.go")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(src, []byte(helperSource), 0o644); err != nil {
		return err
	}
	helper = filepath.Join(dir, "pwhelper")
	cmd = exec.Command("go", "build", "-o", helper, src)
	cmd.Dir = filepath.Dir(src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the helper: %v\n%s", err, out)
	}
	return nil
}

// testOps are the operations every deployment gets, besides init's own.
// %[1]s is the helper's path. Params accept anything, so that what reaches
// the program is decided by prod-write, not by a pattern.
const testOps = `
[[operation]]
name = "append-line"
description = "append a line to a file"
program = "%[1]s"
args = ["append", "{param.out}", "{param.line}"]
targets = ["staging"]
timeout = "20s"
[operation.params.out]
pattern = "(?s).*"
[operation.params.line]
pattern = "(?s).*"

[[operation]]
name = "mark-sleep"
description = "mark a file, then sleep"
program = "%[1]s"
args = ["mark-sleep", "{param.out}", "{param.ms}"]
targets = ["staging"]
timeout = "20s"
[operation.params.out]
pattern = "(?s).*"
[operation.params.ms]
min = 0
max = 60000

[[operation]]
name = "argv"
description = "record argv"
program = "%[1]s"
args = ["argv", "{param.out}", "{param.a}", "{param.b}", "{param.c}", "{param.d}", "{param.e}"]
targets = ["staging"]
[operation.params.out]
pattern = "(?s).*"
[operation.params.a]
pattern = "(?s).*"
[operation.params.b]
pattern = "(?s).*"
[operation.params.c]
pattern = "(?s).*"
[operation.params.d]
pattern = "(?s).*"
[operation.params.e]
pattern = "(?s).*"

[[operation]]
name = "environ"
description = "record the environment"
program = "%[1]s"
args = ["environ", "{param.out}"]
targets = ["staging"]
[operation.params.out]
pattern = "(?s).*"
[operation.env]
pass = ["PW_PASSED"]
secret = ["PW_SECRET"]
set = { PW_SET = "{target}" }

[[operation]]
name = "spawn"
description = "start a helper process and hang"
program = "%[1]s"
args = ["spawn", "{param.out}"]
targets = ["staging"]
timeout = "2s"
[operation.params.out]
pattern = "(?s).*"

[[operation]]
name = "exit"
description = "exit with a status"
program = "%[1]s"
args = ["exit", "{param.code}"]
targets = ["staging"]
[operation.params.code]
min = 0
max = 255

[[operation]]
name = "kill-self"
description = "die by a signal"
program = "%[1]s"
args = ["kill-self", "{param.sig}"]
targets = ["staging"]
[operation.params.sig]
min = 1
max = 31
`

// deployment is one prod-write installation made by init --demo, with the
// test operations added.
type deployment struct {
	t   *testing.T
	dir string
}

func newDeployment(t *testing.T, extraOps string) *deployment {
	t.Helper()
	d := &deployment{t: t, dir: t.TempDir()}
	d.mustRun(nil, "init", "--demo", d.dir)
	ops := fmt.Sprintf(testOps, helper) + extraOps
	if err := os.WriteFile(filepath.Join(d.dir, "operations", "test.toml"), []byte(ops), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *deployment) path(elem ...string) string {
	return filepath.Join(append([]string{d.dir}, elem...)...)
}

func (d *deployment) journalPath() string { return d.path("state", "journal", "receipts.jsonl") }

// result is how one prod-write invocation ended.
type result struct {
	args           []string
	code           int    // exit status, or -1 when a signal ended it
	signal         string // the signal's name, if any
	stdout, stderr string
}

func (r *result) String() string {
	return fmt.Sprintf("prod-write %s: exit %d %s\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.signal, r.stdout, r.stderr)
}

// lastJSON decodes the last line of stderr, where --json puts a refusal.
func (r *result) lastJSON(t *testing.T) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("last stderr line is not JSON: %v\n%s", err, r)
	}
	return m
}

// env is the environment prod-write runs with: nothing of the test's own,
// plus extra.
func (d *deployment) env(extra []string) []string {
	return append([]string{"PATH=/usr/bin:/bin", "HOME=" + d.dir}, extra...)
}

func (d *deployment) command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(prodWrite, args...)
	cmd.Dir = d.dir
	cmd.Env = d.env(env)
	return cmd
}

func finish(cmd *exec.Cmd, err error, args []string, stdout, stderr *bytes.Buffer) *result {
	r := &result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.signal = ws.Signal().String()
		}
	default:
		r.code = -2
		r.stderr += "\n(start: " + err.Error() + ")"
	}
	return r
}

// run runs prod-write with extra environment variables.
func (d *deployment) run(env []string, args ...string) *result {
	cmd := d.command(env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return finish(cmd, err, args, &stdout, &stderr)
}

func (d *deployment) mustRun(env []string, args ...string) *result {
	d.t.Helper()
	r := d.run(env, args...)
	if r.code != 0 {
		d.t.Fatalf("%s", r)
	}
	return r
}

// expect runs prod-write and checks its exit status.
func (d *deployment) expect(code int, env []string, args ...string) *result {
	d.t.Helper()
	r := d.run(env, args...)
	if r.code != code {
		d.t.Fatalf("want exit %d, got %s", code, r)
	}
	return r
}

var fpRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// plan plans op on staging as the agent, with params given as NAME=VALUE.
func (d *deployment) plan(op string, params ...string) string {
	d.t.Helper()
	args := []string{"plan", op, "--target", "staging", "--key", "keys/agent.key"}
	for _, p := range params {
		args = append(args, "--param", p)
	}
	r := d.mustRun(nil, args...)
	fp := fpRE.FindString(r.stdout)
	if fp == "" {
		d.t.Fatalf("no fingerprint: %s", r)
	}
	return fp
}

// approve records a fresh single-use Gera go for fp.
func (d *deployment) approve(fp string) {
	d.t.Helper()
	d.mustRun(nil, "gera", "go", fp, "--key", "keys/gera.key")
}

// entry is one decoded journal line.
type entry struct {
	line []byte
	r    *receipts.Receipt
	err  error
}

// journal reads the journal's complete lines (a torn tail is returned
// apart).
func (d *deployment) journal() (entries []entry, torn []byte) {
	d.t.Helper()
	data, err := os.ReadFile(d.journalPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		d.t.Fatal(err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i != len(data)-1 {
		torn = data[i+1:]
		data = data[:i+1]
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		_, r, err := receipts.Decode(line)
		entries = append(entries, entry{line: line, r: r, err: err})
	}
	return entries, torn
}

// intents returns the journal's intents for fp.
func (d *deployment) intents(fp string) []*receipts.Receipt {
	entries, _ := d.journal()
	var out []*receipts.Receipt
	for _, e := range entries {
		if e.r != nil && e.r.Kind == receipts.KindIntent && e.r.Intent.Fingerprint == fp {
			out = append(out, e.r)
		}
	}
	return out
}

// outcomes returns the journal's outcomes by run id.
func (d *deployment) outcomes() map[string]*receipts.Receipt {
	entries, _ := d.journal()
	out := map[string]*receipts.Receipt{}
	for _, e := range entries {
		if e.r != nil && e.r.Kind == receipts.KindOutcome {
			out[e.r.RunID] = e.r
		}
	}
	return out
}

// replayReport is replay --json's output.
type replayReport struct {
	Receipts []receipts.Result `json:"receipts"`
	Summary  receipts.Summary  `json:"summary"`
	code     int
}

func (d *deployment) replay() *replayReport {
	d.t.Helper()
	r := d.run(nil, "replay", "--json")
	if r.code != 0 && r.code != 1 {
		d.t.Fatalf("replay: %s", r)
	}
	rep := &replayReport{code: r.code}
	if err := json.Unmarshal([]byte(r.stdout), rep); err != nil {
		d.t.Fatalf("replay --json: %v\n%s", err, r)
	}
	return rep
}

// replayOK checks that replay verifies the whole journal: exit 0, nothing
// failed, nothing incomplete.
func (d *deployment) replayOK() *replayReport {
	d.t.Helper()
	rep := d.replay()
	if rep.code != 0 || !rep.Summary.OK || rep.Summary.Failed != 0 || rep.Summary.Incomplete != 0 {
		d.t.Fatalf("replay does not pass: exit %d, summary %+v\n%s", rep.code, rep.Summary, rep.problems())
	}
	return rep
}

// replayOnlyIncomplete checks that the only thing replay finds is intents
// left without an outcome by the run ids in allowed (a crash), and that
// every entry in the journal verifies.
func (d *deployment) replayOnlyIncomplete(allowed map[string]bool) *replayReport {
	d.t.Helper()
	rep := d.replay()
	incomplete := 0
	for _, res := range rep.Receipts {
		for _, p := range res.Problems {
			if p.Code == receipts.Incomplete && allowed[res.RunID] {
				incomplete++
				continue
			}
			d.t.Errorf("replay: line %d seq %d %s (run %s): %s: %s", res.Line, res.Seq, res.Kind, res.RunID, p.Code, p.Detail)
		}
	}
	if rep.Summary.Failed != 0 || rep.Summary.Incomplete != incomplete {
		d.t.Errorf("replay summary %+v, want 0 failed and %d incomplete", rep.Summary, incomplete)
	}
	return rep
}

func (rep *replayReport) problems() string {
	var b strings.Builder
	for _, res := range rep.Receipts {
		for _, p := range res.Problems {
			fmt.Fprintf(&b, "line %d seq %d %s: %s: %s\n", res.Line, res.Seq, res.Kind, p.Code, p.Detail)
		}
	}
	return b.String()
}

// checkChain checks the journal's sequence numbers and prev hashes
// directly, independently of replay.
func (d *deployment) checkChain() []entry {
	d.t.Helper()
	entries, torn := d.journal()
	if len(torn) > 0 {
		d.t.Errorf("journal ends with %d torn bytes", len(torn))
	}
	prev := ""
	for i, e := range entries {
		if e.err != nil {
			d.t.Fatalf("journal line %d: %v", i+1, e.err)
		}
		if e.r.Seq != uint64(i+1) || e.r.Prev != prev {
			d.t.Fatalf("journal line %d: seq %d prev %.12s, want seq %d prev %.12s", i+1, e.r.Seq, e.r.Prev, i+1, prev)
		}
		prev = receipts.LineHash(e.line)
	}
	return entries
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
