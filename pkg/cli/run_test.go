package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/fastrun"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

func TestNewCmdRunArgs(t *testing.T) {
	const fp = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	for _, tc := range []struct {
		args    []string
		wantErr bool
	}{
		{[]string{fp}, false},
		{nil, true},
		{[]string{fp, fp}, true},
	} {
		var got *RunOptions
		cmd := NewCmdRun(&Factory{}, func(o *RunOptions) error { got = o; return nil })
		cmd.SetArgs(tc.args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		if (err != nil) != tc.wantErr {
			t.Errorf("args %q: error %v, want error %v", tc.args, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && (got == nil || got.Fingerprint != fp) {
			t.Errorf("args %q: options %+v", tc.args, got)
		}
	}
}

// runHarness runs commands in process against one deployment, with the
// environment and clock faked through the Factory.
type runHarness struct {
	t   *testing.T
	dir string
	env map[string]string
	now time.Time
	// journalSync, when set, is the journal's fsync (Factory.JournalSync).
	journalSync func(*os.File) error
	// errTTY makes stderr a terminal, as far as the commands can tell.
	errTTY bool
}

func newRunHarness(t *testing.T) *runHarness {
	h := &runHarness{t: t, dir: t.TempDir(), env: map[string]string{}, now: time.Now().UTC()}
	// An absolute DIR: init resolves a relative one against the process's
	// working directory, not the Factory's Getwd.
	if code, _, stderr := h.run("init", "--demo", h.dir); code != 0 {
		t.Fatalf("init: %d %s", code, stderr)
	}
	return h
}

func (h *runHarness) run(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	f := &Factory{Env: localapi.Env{
		IO:        &IOStreams{In: strings.NewReader(""), Out: &stdout, Err: &stderr, ErrTTY: h.errTTY},
		Now:       func() time.Time { return h.now },
		LookupEnv: func(k string) (string, bool) { v, ok := h.env[k]; return v, ok },
		Getwd:     func() (string, error) { return h.dir, nil },

		JournalSync: h.journalSync,
	}}
	code := Run(args, f)
	return code, stdout.String(), stderr.String()
}

var runFPRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

func (h *runHarness) plan(op string, args ...string) string {
	h.t.Helper()
	code, stdout, stderr := h.run(append([]string{"plan", op, "--target", "staging", "--key", h.key("agent")}, args...)...)
	fp := runFPRE.FindString(stdout)
	if code != 0 || fp == "" {
		h.t.Fatalf("plan: %d %s %s", code, stdout, stderr)
	}
	return fp
}

const inProcessOps = `
[[operation]]
name = "print-env"
description = "print the environment"
program = "env"
targets = ["staging"]
[operation.env]
pass = ["PASSED"]
secret = ["TOKEN"]
set = { WHERE = "{target}" }

[[operation]]
name = "fail"
description = "exit 1"
program = "false"
targets = ["staging"]
`

// TestRunThroughTheFactory runs an approved plan in process: the program's
// environment comes only from the plan and the Factory's LookupEnv (the
// secret read at run time), --json reports the run, and the secret is in
// no output of prod-write's own.
func TestRunThroughTheFactory(t *testing.T) {
	h := newRunHarness(t)
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "test.toml"), []byte(inProcessOps), 0o644); err != nil {
		t.Fatal(err)
	}
	h.env["PASSED"] = "p"
	h.env["TOKEN"] = "tok-3141592653"
	h.env["LD_PRELOAD"] = "/evil.so" // the caller's; never the program's
	fp := h.plan("print-env")
	if code, _, stderr := h.run("gera", "go", fp, "--key", h.key("gera")); code != 0 {
		t.Fatal(stderr)
	}

	code, stdout, stderr := h.run("run", fp, "--json")
	if code != 0 {
		t.Fatalf("run: %d %s", code, stderr)
	}
	env := strings.Split(strings.TrimSpace(stdout), "\n")
	slices.Sort(env)
	if want := []string{"PASSED=p", "TOKEN=tok-3141592653", "WHERE=staging"}; !slices.Equal(env, want) {
		t.Errorf("the program's environment %q, want %q", env, want)
	}
	var ran struct {
		Outcome     string `json:"outcome"`
		Operation   string `json:"operation"`
		Fingerprint string `json:"fingerprint"`
		ExitCode    *int   `json:"exit_code"`
		Intent      uint64 `json:"intent"`
		Receipt     uint64 `json:"receipt"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(stderr)), &ran); err != nil {
		t.Fatalf("--json: %v: %s", err, stderr)
	}
	if ran.Outcome != "ran" || ran.Operation != "print-env" || ran.Fingerprint != fp || ran.ExitCode == nil || *ran.ExitCode != 0 || ran.Intent != 1 || ran.Receipt != 2 {
		t.Errorf("--json says %+v", ran)
	}

	// Refused: spent, then secret missing. Neither output holds the secret.
	code, stdout, stderr = h.run("run", fp, "--json")
	if code != ExitRefused || !strings.Contains(stderr, `"code":"evidence_consumed"`) {
		t.Errorf("second run: %d %s", code, stderr)
	}
	delete(h.env, "TOKEN")
	if code, _, _ := h.run("gera", "go", fp, "--key", h.key("gera")); code != 0 {
		t.Fatal("gera go")
	}
	code, stdout2, stderr2 := h.run("run", fp, "--json")
	if code != ExitRefused || !strings.Contains(stderr2, `"code":"param_invalid"`) || !strings.Contains(stderr2, "TOKEN") {
		t.Errorf("run without the secret: %d %s", code, stderr2)
	}
	for _, s := range []string{stdout, stderr, stdout2, stderr2} {
		if strings.Contains(s, "tok-3141592653") {
			t.Errorf("the secret is in prod-write's output: %s", s)
		}
	}
	journal, err := os.ReadFile(filepath.Join(h.dir, "state", "journal", "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(journal, []byte("\n")); n != 2 {
		t.Errorf("the journal has %d entries; the refused runs must add none", n)
	}
}

// TestRunPropagatesExitStatus: run returns the program's status, and
// --json still reports the run.
func TestRunPropagatesExitStatus(t *testing.T) {
	h := newRunHarness(t)
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "test.toml"), []byte(inProcessOps), 0o644); err != nil {
		t.Fatal(err)
	}
	fp := h.plan("fail")
	if code, _, stderr := h.run("gera", "go", fp, "--key", h.key("gera")); code != 0 {
		t.Fatal(stderr)
	}
	code, _, stderr := h.run("run", fp, "--json")
	if code != 1 || !strings.Contains(stderr, `"outcome":"ran"`) || !strings.Contains(stderr, `"exit_code":1`) {
		t.Errorf("run: exit %d, stderr %s", code, stderr)
	}
}

// TestRunSaysWhatRanAtATerminal: at a terminal, run ends with one line on
// stderr naming what ran, its status and its receipts; not in a script,
// and not with --json, which says it in JSON.
func TestRunSaysWhatRanAtATerminal(t *testing.T) {
	h := newRunHarness(t)
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "test.toml"), []byte(inProcessOps), 0o644); err != nil {
		t.Fatal(err)
	}
	fp := h.plan("fail")
	if code, _, stderr := h.run("gera", "go", fp, "--key", h.key("gera"), "--uses", "3"); code != 0 {
		t.Fatal(stderr)
	}
	h.errTTY = true
	code, _, stderr := h.run("run", fp)
	if want := "prod-write: ran fail " + fp[:19] + "… (exit 1); receipts 1 and 2\n"; code != 1 || stderr != want {
		t.Errorf("at a terminal: exit %d, stderr %q, want %q", code, stderr, want)
	}
	if _, _, stderr := h.run("run", fp, "--json"); strings.Contains(stderr, "prod-write: ran") {
		t.Errorf("--json at a terminal: %q", stderr)
	}
	h.errTTY = false
	if _, _, stderr := h.run("run", fp); stderr != "" {
		t.Errorf("not a terminal: %q", stderr)
	}
}

// TestRunRefusesWithoutApproval: an unapproved mutating plan is refused
// with no_approval, and no receipt is written.
func TestRunRefusesWithoutApproval(t *testing.T) {
	h := newRunHarness(t)
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "test.toml"), []byte(inProcessOps), 0o644); err != nil {
		t.Fatal(err)
	}
	fp := h.plan("fail")
	code, stdout, stderr := h.run("run", fp, "--json")
	if code != ExitRefused || !strings.Contains(stderr, `"code":"no_approval"`) || stdout != "" {
		t.Errorf("run: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "state", "journal", "receipts.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a refused run touched the journal: %v", err)
	}
}

// key is the path of a demo principal's key (absolute: like init's DIR, a
// --key path is resolved against the process's working directory).
func (h *runHarness) key(name string) string { return filepath.Join(h.dir, "keys", name+".key") }

// fastrun renders the service's answer to a typed run with its Render: it
// says what the command says through serviceAPI, byte for byte, and exits
// alike, for a run, a run killed on its timeout, a refusal and an error the
// service judged (with its hint), each after the answer's notices. Both are
// held to the text written out here (docs/JSON.md's outcome lines), not to
// each other: they print with the same functions, so a fault in those
// would otherwise pass.
func TestRunAnswerRendersAsTheCommand(t *testing.T) {
	fp := "sha256:" + strings.Repeat("ab", 32)
	ran := &api.RunResult{FormatVersion: localapi.FormatVersion, Outcome: "ran", Operation: "deploy", Fingerprint: fp, ExitCode: 3, Intent: 7, Receipt: 8}
	killed := *ran
	killed.ExitCode, killed.TimedOut, killed.Timeout = 124, true, 3*time.Second
	refused := refusal.New(refusal.NoApproval, "no approval").For("deploy", fp).Needs("an approval")
	failed := &api.Error{Code: "io", Exit: 74, Message: "the journal could not be written", Hint: "see the service's log"}
	notices := []api.Notice{{Kind: api.NoticeWarning, Text: "receipts not archived"}, {Kind: api.NoticePosted, Text: "decision posted to slack"}}
	const (
		warning = "prod-write: warning: receipts not archived\n"
		posted  = "prod-write: decision posted to slack\n"
	)
	var (
		ranLine     = `{"format_version":1,"outcome":"ran","operation":"deploy","fingerprint":"` + fp + `","exit_code":3,"intent":7,"receipt":8}` + "\n"
		ranTTY      = "prod-write: ran deploy sha256:abababababab… (exit 3); receipts 7 and 8\n"
		killedLine  = `{"format_version":1,"outcome":"ran","operation":"deploy","fingerprint":"` + fp + `","exit_code":124,"intent":7,"receipt":8}` + "\n"
		killedText  = "prod-write: deploy timed out after 3s and was killed (exit 124); receipts 7 and 8\n"
		refusedLine = `{"outcome":"refused","code":"no_approval","reason":"no approval","operation":"deploy","fingerprint":"` + fp + `","missing":["an approval"],"exit_code":77,"format_version":1}` + "\n"
		refusedText = "prod-write: refused (no_approval): no approval\nprod-write: hint: missing: an approval\n"
		failedLine  = `{"code":"io","error":"the journal could not be written","exit_code":74,"format_version":1,"outcome":"error"}` + "\n"
		failedText  = "prod-write: error: the journal could not be written\nprod-write: hint: see the service's log\n"
	)
	for _, c := range []struct {
		name           string
		r              *api.RunResult
		err            error
		asJSON, errTTY bool
		want           string
		code           int
	}{
		{"ran", ran, nil, false, false, warning + posted, 3},
		{"ran", ran, nil, false, true, warning + posted + ranTTY, 3},
		{"ran", ran, nil, true, false, warning + ranLine, 3},
		{"ran", ran, nil, true, true, warning + ranLine, 3},
		{"killed", &killed, nil, false, false, warning + posted + killedText, 124},
		{"killed", &killed, nil, false, true, warning + posted + killedText, 124},
		{"killed", &killed, nil, true, false, warning + killedLine, 124},
		{"killed", &killed, nil, true, true, warning + killedLine, 124},
		{"refused", nil, refused, false, false, warning + posted + refusedText, 77},
		{"refused", nil, refused, false, true, warning + posted + refusedText, 77},
		{"refused", nil, refused, true, false, warning + refusedLine, 77},
		{"refused", nil, refused, true, true, warning + refusedLine, 77},
		{"failed", nil, failed, false, false, warning + posted + failedText, 74},
		{"failed", nil, failed, false, true, warning + posted + failedText, 74},
		{"failed", nil, failed, true, false, warning + failedLine, 74},
		{"failed", nil, failed, true, true, warning + failedLine, 74},
	} {
		ans := api.Answer{Notices: notices}
		switch {
		case c.err == refused:
			ans.Refusal = refused
		case c.err == failed:
			ans.Error = failed
		default:
			ans.Result, _ = json.Marshal(c.r)
		}
		body, _ := json.Marshal(ans)
		var got bytes.Buffer
		if code := fastrun.Render(body, c.asJSON, c.errTTY, &got); got.String() != c.want || code != c.code {
			t.Errorf("%s json %v tty %v: Render says %q (exit %d), want %q (exit %d)", c.name, c.asJSON, c.errTTY, got.String(), code, c.want, c.code)
		}

		// The command, as it prints the same outcome in this process.
		var cmd bytes.Buffer
		f := &Factory{Env: localapi.Env{IO: &IOStreams{Out: io.Discard, Err: &cmd, ErrTTY: c.errTTY}, JSON: c.asJSON}}
		for _, n := range notices {
			f.Notify(n)
		}
		err := c.err
		if err == nil {
			err = printRun(f, c.r)
		}
		code := 0
		if err != nil {
			printError(f, err)
			code = ExitCode(err)
		}
		if cmd.String() != c.want || code != c.code {
			t.Errorf("%s json %v tty %v: the command says %q (exit %d), want %q (exit %d)", c.name, c.asJSON, c.errTTY, cmd.String(), code, c.want, c.code)
		}
	}
}
