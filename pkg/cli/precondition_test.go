package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/store"
)

const preconditionOps = `
[[operation]]
name = "ver"
mutating = false
program = "cat"
args = ["{param.file}"]
targets = ["staging"]
[operation.params.file]
pattern = "^version-[a-z]+[.]txt$"

[[operation]]
name = "deploy"
program = "touch"
args = ["deployed-{param.svc}"]
targets = ["staging"]
[operation.params.svc]
pattern = "^[a-z]+$"
[operation.precondition]
check = "ver"
params = { file = "version-{param.svc}.txt" }
`

// TestRunRefusesABorrowedCheck: a plan names its check by fingerprint, so
// an agent could sign a plan that binds the check of another plan (another
// service's version, which does not change) with that check's output. Run
// refuses it before anything is consumed: the check must be this plan's
// own precondition, by operation, target and params
// (docs/adr/0032-the-gate-judges-the-precondition-check.md).
func TestRunRefusesABorrowedCheck(t *testing.T) {
	h := newRunHarness(t)
	for name, body := range map[string]string{"operations/pre.toml": preconditionOps, "version-a.txt": "a1\n", "version-b.txt": "b1\n"} {
		if err := os.WriteFile(filepath.Join(h.dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fpA := h.plan("deploy", "--param", "svc=a")
	st, err := store.OpenDir(filepath.Join(h.dir, "state", "store"))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := keys.Load(h.key("agent"))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := approval.LoadPolicy(filepath.Join(h.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	penvA, err := st.GetPlan(fpA)
	if err != nil {
		t.Fatal(err)
	}
	planA, _, err := policy.DecodePlan(penvA)
	if err != nil {
		t.Fatal(err)
	}
	// Honest plan of b, then the forgery: b's plan with a's check.
	fpB := h.plan("deploy", "--param", "svc=b")
	penvB, _ := st.GetPlan(fpB)
	planB, _, err := policy.DecodePlan(penvB)
	if err != nil {
		t.Fatal(err)
	}
	forged := *planB
	forged.Precondition = planA.Precondition
	forged.Fingerprint = operations.Fingerprint(&forged.Bound)
	env, err := approval.Sign(agent, approval.TypePlan, &forged)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutPlan(forged.Fingerprint, env); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := h.run("gera", "go", forged.Fingerprint, "--key", h.key("gera")); code != 0 {
		t.Fatal(stderr)
	}
	// b's version changes; a's does not.
	if err := os.WriteFile(filepath.Join(h.dir, "version-b.txt"), []byte("b2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	journal := func() string {
		b, err := os.ReadFile(filepath.Join(h.dir, "state", "journal", "receipts.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := journal()
	code, _, stderr := h.run("run", forged.Fingerprint, "--json")
	if code != 77 || !strings.Contains(stderr, `"code":"precondition_changed"`) || !strings.Contains(stderr, "is not precondition ver of this plan") {
		t.Fatalf("run of a plan with a borrowed check: exit %d\n%s", code, stderr)
	}
	// Refused before the borrowed check ran: no receipt of it either.
	if journal() != before {
		t.Fatal("the borrowed check ran")
	}
	if _, err := os.Stat(filepath.Join(h.dir, "deployed-b")); err == nil {
		t.Fatal("the deploy ran")
	}
	// Nothing was consumed: the go still counts.
	if code, stdout, _ := h.run("status", forged.Fingerprint, "--json"); !strings.Contains(stdout, `"used": 0`) {
		t.Fatalf("status after the refusal: %d %s", code, stdout)
	}
}
