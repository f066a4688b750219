package runtest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// noRunFor checks what every refusal promises: no intent receipt claims fp
// ran.
func (d *deployment) noRunFor(fp string) {
	d.t.Helper()
	if in := d.intents(fp); len(in) != 0 {
		d.t.Errorf("a refused run left %d intent receipts for %s", len(in), fp)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the program left no record: %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// TestShellMetacharactersAreLiteral passes parameters a shell would act on
// and checks that the program gets them as the exact bytes planned, and
// that nothing a shell would have done happened (docs/DESIGN.md §6: never a shell).
func TestShellMetacharactersAreLiteral(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, "")
	rec := d.path("argv.json")
	params := []string{
		"x; touch pwned",
		"$(touch pwned2)",
		"`touch pwned3`",
		"line one\ntouch pwned4",
		"'\"|| touch pwned5 & > pwned6 * ~ $HOME \\",
	}
	args := []string{"out=" + rec}
	for i, p := range params {
		args = append(args, string(rune('a'+i))+"="+p)
	}
	fp := d.plan("argv", args...)
	d.approve(fp)
	d.mustRun(nil, "run", fp)

	var argv []string
	readJSON(t, rec, &argv)
	want := append([]string{helper, "argv", rec}, params...)
	if !slices.Equal(argv, want) {
		t.Errorf("the program got argv\n%q\nwant\n%q", argv, want)
	}
	matches, _ := filepath.Glob(d.path("pwned*"))
	if len(matches) > 0 {
		t.Errorf("a shell ran: %v", matches)
	}
	d.replayOK()
}

// TestEnvironmentIsBuiltFromScratch runs a program that records its whole
// environment, from a caller whose environment carries LD_PRELOAD,
// BASH_ENV, a hijacked PATH and IFS: the program sees exactly the declared
// variables (docs/DESIGN.md §6).
func TestEnvironmentIsBuiltFromScratch(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, "")
	rec := d.path("environ.json")
	hostile := []string{
		"LD_PRELOAD=" + d.path("evil.so"),
		"BASH_ENV=" + d.path("evil.sh"),
		"ENV=" + d.path("evil.sh"),
		"PATH=" + d.path("evil-bin") + ":/usr/bin:/bin",
		"IFS=/",
		"PW_UNDECLARED=leak",
		"PW_PASSED=passed value",
		"PW_SECRET=the secret",
	}
	r := d.run(hostile, "plan", "environ", "--target", "staging", "--key", "keys/agent.key", "--param", "out="+rec)
	fp := fpRE.FindString(r.stdout)
	if r.code != 0 || fp == "" {
		t.Fatalf("%s", r)
	}
	d.approve(fp)
	if r := d.run(hostile, "run", fp); r.code != 0 {
		t.Fatalf("%s", r)
	}
	var env []string
	readJSON(t, rec, &env)
	slices.Sort(env)
	want := []string{"PW_PASSED=passed value", "PW_SECRET=the secret", "PW_SET=staging"}
	if !slices.Equal(env, want) {
		t.Errorf("the program's environment is\n%q\nwant exactly\n%q", env, want)
	}
}

// TestProgramReplacedAfterApproval swaps the approved program's bytes for a
// script that would leave a mark: run refuses with fingerprint_mismatch,
// nothing runs, no receipt claims it did, and the approval is not spent
// (putting the approved bytes back lets it run).
func TestProgramReplacedAfterApproval(t *testing.T) {
	t.Parallel()
	prog := filepath.Join(t.TempDir(), "tool")
	genuine, err := os.ReadFile(helper)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, genuine, 0o755); err != nil {
		t.Fatal(err)
	}
	d := newDeployment(t, `
[[operation]]
name = "tool"
description = "a program in a directory the test controls"
program = "`+prog+`"
args = ["append", "{param.out}", "genuine"]
targets = ["staging"]
[operation.params.out]
pattern = "(?s).*"
`)
	out := d.path("out.txt")
	mark := d.path("replaced-ran")
	fp := d.plan("tool", "out="+out)
	d.approve(fp)

	for _, how := range []string{"in place", "by rename"} {
		evil := "#!/bin/sh\necho replaced >> " + mark + "\n"
		switch how {
		case "in place":
			err = os.WriteFile(prog, []byte(evil), 0o755)
		case "by rename":
			tmp := prog + ".new"
			if err = os.WriteFile(tmp, []byte(evil), 0o755); err == nil {
				err = os.Rename(tmp, prog)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		r := d.expect(77, nil, "run", fp, "--json")
		if code := r.lastJSON(t)["code"]; code != "fingerprint_mismatch" {
			t.Errorf("replaced %s: code %v, want fingerprint_mismatch\n%s", how, code, r)
		}
		if exists(mark) || exists(out) {
			t.Errorf("replaced %s: something ran", how)
		}
		d.noRunFor(fp)
	}

	if err := os.WriteFile(prog, genuine, 0o755); err != nil {
		t.Fatal(err)
	}
	d.mustRun(nil, "run", fp)
	if got := readLines(t, out); len(got) != 1 || got[0] != "genuine" {
		t.Errorf("out.txt = %q", got)
	}
	if exists(mark) {
		t.Error("the replacement ran")
	}
	d.replayOK()
}

// TestSecretValueStaysOut runs an operation with a secret: the program gets
// the value, and it appears nowhere under the state directory, in any
// receipt, in any --json output or in errors, not even as a sha256.
func TestSecretValueStaysOut(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, "")
	const secret = "s3cret-Zq9-value"
	sum := sha256.Sum256([]byte(secret))
	needles := []string{secret, hex.EncodeToString(sum[:])}
	env := []string{"PW_SECRET=" + secret}
	rec := d.path("environ.json") // outside state/: the program's own choice

	var outputs []*result
	keep := func(r *result) *result { outputs = append(outputs, r); return r }
	r := keep(d.run(env, "plan", "environ", "--target", "staging", "--key", "keys/agent.key", "--param", "out="+rec, "--json"))
	fp := fpRE.FindString(r.stdout)
	if r.code != 0 || fp == "" {
		t.Fatalf("%s", r)
	}
	d.approve(fp)
	keep(d.run(env, "status", fp, "--json"))
	if r := keep(d.run(env, "run", fp, "--json")); r.code != 0 {
		t.Fatalf("%s", r)
	}
	var got []string
	readJSON(t, rec, &got)
	if !slices.Contains(got, "PW_SECRET="+secret) {
		t.Fatalf("the program did not get the secret: %q", got)
	}
	// Refusals, with the secret in the environment and without it.
	r = keep(d.expect(77, env, "run", fp, "--json"))
	if code := r.lastJSON(t)["code"]; code != "evidence_consumed" {
		t.Errorf("second run: code %v, want evidence_consumed\n%s", code, r)
	}
	d.approve(fp)
	r = keep(d.expect(77, nil, "run", fp, "--json"))
	if code := r.lastJSON(t)["code"]; code != "param_invalid" {
		t.Errorf("run without the secret set: code %v, want param_invalid\n%s", code, r)
	}
	if r := keep(d.run(env, "run", fp, "--json")); r.code != 0 {
		t.Fatalf("the refusal for the missing secret spent the approval: %s", r)
	}
	keep(d.run(env, "status", fp, "--json"))
	keep(d.run(env, "receipts", "list", "--json"))
	keep(d.run(env, "receipts", "show", "1"))
	keep(d.run(env, "receipts", "show", "2"))
	keep(d.run(env, "replay", "--json"))

	for _, r := range outputs {
		for _, n := range needles {
			if strings.Contains(withPayloads(r.stdout), n) || strings.Contains(withPayloads(r.stderr), n) {
				t.Errorf("the secret (or its hash) is in the output of prod-write %s", strings.Join(r.args, " "))
			}
		}
	}
	files := 0
	filepath.WalkDir(d.path("state"), func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			t.Error(err)
			return nil
		}
		for _, n := range needles {
			if strings.Contains(withPayloads(string(b)), n) {
				t.Errorf("the secret (or its hash) is in %s", path)
			}
		}
		return nil
	})
	// A control for the search: the plan inside the receipts binds the
	// secret's name, visible only once payloads are decoded.
	journal, err := os.ReadFile(d.journalPath())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(journal), `"name":"PW_SECRET"`) || !strings.Contains(withPayloads(string(journal)), `"name":"PW_SECRET","kind":"secret"`) {
		t.Error("withPayloads does not see inside the receipts' envelopes")
	}
	if files < 5 {
		t.Errorf("only %d files under state/: the walk looked in the wrong place", files)
	}
	if n := len(d.intents(fp)); n != 2 {
		t.Errorf("%d intents, want 2: the refused runs must leave none", n)
	}
}

// TestTimeoutKillsTheProcessGroup runs a program that starts a helper
// process and hangs past the operation's timeout: run exits 124, the
// program and its helper are both killed, and the outcome receipt says so.
func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, "")
	pids := d.path("pids")
	fp := d.plan("spawn", "out="+pids)
	d.approve(fp)
	start := time.Now()
	r := d.run(nil, "run", fp)
	elapsed := time.Since(start)
	var alive []int
	fields := strings.Fields(strings.Join(readLines(t, pids), " "))
	if len(fields) != 2 {
		t.Fatalf("the program did not record its pid and its helper's: %q (%s)", fields, r)
	}
	for _, f := range fields {
		pid, _ := strconv.Atoi(f)
		if pid <= 1 {
			t.Fatalf("bad pid %q", f)
		}
		if !waitFor(3*time.Second, func() bool { return !running(pid) }) {
			alive = append(alive, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if r.code != 124 {
		t.Errorf("want exit 124 on the timeout, got %s", r)
	}
	if elapsed > 15*time.Second {
		t.Errorf("run took %v for a 2s timeout", elapsed)
	}
	if len(alive) > 0 {
		t.Errorf("processes of the program's group survived the timeout: %v", alive)
	}
	in := d.intents(fp)
	if len(in) != 1 {
		t.Fatalf("%d intents", len(in))
	}
	o := d.outcomes()[in[0].RunID]
	if o == nil || !o.Outcome.TimedOut || o.Outcome.ExitCode != 124 || o.Outcome.Signal != "SIGKILL" {
		t.Errorf("outcome receipt %+v, want timed out, exit 124, SIGKILL", o)
	}
}

// running reports whether pid is a live process (not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestSignalsAreForwarded sends SIGTERM and SIGINT to prod-write while
// its program runs: the program gets the signal (it runs in its own process
// group, out of reach of a terminal's ^C), prod-write exits 128+N, and the
// outcome receipt records the signal.
func TestSignalsAreForwarded(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, "")
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGTERM, "SIGTERM"}, {syscall.SIGINT, "SIGINT"}} {
		mark := d.path("mark-" + tc.name)
		fp := d.plan("mark-sleep", "out="+mark, "ms=15000")
		d.approve(fp)
		cmd := d.command(nil, "run", fp)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if !waitFor(10*time.Second, func() bool { return len(readLines(t, mark)) == 1 }) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the program never started")
		}
		start := time.Now()
		cmd.Process.Signal(tc.sig)
		err := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if took := time.Since(start); code != 128+int(tc.sig) || took > 10*time.Second {
			t.Errorf("%s: prod-write ended with %v (exit %d) after %v; want exit %d at once", tc.name, err, code, took, 128+int(tc.sig))
		}
		if pid, _ := strconv.Atoi(readLines(t, mark)[0]); pid > 1 && running(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("%s: the program is still running", tc.name)
		}
		in := d.intents(fp)
		if len(in) != 1 {
			t.Fatalf("%d intents", len(in))
		}
		o := d.outcomes()[in[0].RunID]
		if o == nil || o.Outcome.Signal != tc.name || o.Outcome.ExitCode != 128+int(tc.sig) {
			t.Errorf("%s: outcome %+v", tc.name, o)
		}
	}
	d.replayOK()
}

// TestExitStatusIsPropagatedAndRecorded checks that run exits with the
// program's status (128+N for signal N) and that the outcome receipt
// records it.
func TestExitStatusIsPropagatedAndRecorded(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, "")
	for _, tc := range []struct {
		op, param string
		code      int
		signal    string
	}{
		{"exit", "code=0", 0, ""},
		{"exit", "code=1", 1, ""},
		{"exit", "code=42", 42, ""},
		{"kill-self", "sig=15", 128 + 15, "SIGTERM"},
	} {
		fp := d.plan(tc.op, tc.param)
		d.approve(fp)
		r := d.run(nil, "run", fp)
		if r.code != tc.code {
			t.Errorf("%s %s: want exit %d, got %s", tc.op, tc.param, tc.code, r)
		}
		in := d.intents(fp)
		if len(in) != 1 {
			t.Fatalf("%s %s: %d intents", tc.op, tc.param, len(in))
		}
		o := d.outcomes()[in[0].RunID]
		if o == nil || o.Outcome.ExitCode != tc.code || o.Outcome.Signal != tc.signal || o.Outcome.TimedOut {
			t.Errorf("%s %s: outcome %+v, want exit %d signal %q", tc.op, tc.param, o, tc.code, tc.signal)
		}
	}
	// A program that fails is still a verified run.
	rep := d.replayOK()
	if rep.Summary.Runs != 4 {
		t.Errorf("replay summary %+v", rep.Summary)
	}
}

// withPayloads returns s followed by the decoded payload of every DSSE
// envelope in it, however deeply nested (a receipt embeds the plan and the
// evidence as envelopes), so a search sees what base64 would hide.
func withPayloads(s string) string {
	var b strings.Builder
	b.WriteString(s)
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if p, ok := x.(string); ok && k == "payload" {
					if raw, err := base64.StdEncoding.DecodeString(p); err == nil {
						b.WriteString("\n")
						b.WriteString(withPayloads(string(raw)))
					}
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	// The text may be JSON, JSON lines, or prose with JSON lines in it.
	for _, line := range append([]string{s}, strings.Split(s, "\n")...) {
		dec := json.NewDecoder(strings.NewReader(line))
		for {
			var v any
			if dec.Decode(&v) != nil {
				break
			}
			walk(v)
		}
	}
	return b.String()
}
