package receipts_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// TestReplayJudgesPreconditions: replay gives the gate what the intent says
// run saw of the precondition (docs/adr/0025-preconditions.md), so it
// agrees with the gate. A run whose intent records another output, a failed
// check, another check, or no check at all fails replay as the gate refused
// it; the untouched journal (the check's runs at plan and run time, then
// the deploy) passes.
func TestReplayJudgesPreconditions(t *testing.T) {
	w := &world{t: t, dir: t.TempDir()}
	w.pw("init", "--demo", w.dir)
	ops := `[[operation]]
name = "ver"
mutating = false
program = "/bin/cat"
args = ["version.txt"]
targets = ["staging"]

[[operation]]
name = "deploy"
program = "/bin/true"
targets = ["staging"]
[operation.precondition]
check = "ver"
`
	for name, body := range map[string]string{"operations/pre.toml": ops, "version.txt": "v1\n"} {
		if err := os.WriteFile(filepath.Join(w.dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := func(id string) string { return filepath.Join(w.dir, "keys", id+".key") }
	fp := fpRE.FindString(w.pw("plan", "deploy", "--target", "staging", "--key", key("agent")))
	w.pw("gera", "go", fp, "--key", key("gera"))
	w.pw("run", fp)
	data, err := os.ReadFile(filepath.Join(w.dir, "state", "journal", "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	w.journal = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(w.journal) != 6 {
		t.Fatalf("journal has %d lines, want 6 (check at plan, check at run, deploy)", len(w.journal))
	}
	if w.runner, err = keys.Load(key("runner")); err != nil {
		t.Fatal(err)
	}
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if res, sum := chReplay(t, policy, nil, w.journal); !sum.OK {
		t.Fatalf("the untouched journal: %v", chProblems(res))
	}
	const deploy = 4 // 0-based line of the deploy's intent
	if _, r, err := receipts.Decode([]byte(w.journal[deploy])); err != nil || r.Intent == nil || r.Intent.Precondition == nil {
		t.Fatalf("line %d is not the deploy's intent with what run saw: %v", deploy+1, err)
	}
	other := "sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct {
		name string
		edit func(r *receipts.Receipt)
		want string
	}{
		{"another output", func(r *receipts.Receipt) { r.Intent.Precondition.OutputSHA256 = other }, "prints something else now"},
		{"a failed check", func(r *receipts.Receipt) { r.Intent.Precondition.ExitCode = 1 }, "exited 1 now"},
		{"another check", func(r *receipts.Receipt) { r.Intent.Precondition.CheckFingerprint = other }, "is not the precondition the plan binds"},
		{"no check", func(r *receipts.Receipt) { r.Intent.Precondition = nil }, "was not run again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A runner-key holder writes (and chains) an intent of a run
			// the gate should have refused.
			lines := w.edit(w.journal, deploy, w.runner, true, tc.edit)
			res, sum := chReplay(t, policy, nil, lines)
			if sum.OK {
				t.Fatal("replay passes a run on a changed precondition")
			}
			r := res[deploy]
			if len(r.Problems) != 1 || r.Problems[0].Code != receipts.GateNotSatisfied || !strings.Contains(r.Problems[0].Detail, "precondition_changed") || !strings.Contains(r.Problems[0].Detail, tc.want) {
				t.Fatalf("line %d: %+v; want gate_not_satisfied, precondition_changed, %q", deploy+1, r.Problems, tc.want)
			}
		})
	}
}
