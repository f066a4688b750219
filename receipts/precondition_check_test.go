package receipts_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// TestReplayJudgesTheCheckPlan: which check a precondition names is a rule
// over signed records (the plan, the check's own plan), not something the
// runner observes, so replay judges it itself (docs/adr/0032-the-gate-judges-the-precondition-check.md).
// An agent signs a plan whose precondition is named "ver" but binds the
// plan of a check whose output never changes; a holder of the runner key
// writes the run run would have refused. Replay fails it, whatever check
// plan the intent carries, or none.
func TestReplayJudgesTheCheckPlan(t *testing.T) {
	w := &world{t: t, dir: t.TempDir()}
	w.pw("init", "--demo", w.dir)
	ops := `[[operation]]
name = "ver"
mutating = false
program = "/bin/cat"
args = ["version.txt"]
targets = ["staging"]

[[operation]]
name = "same"
mutating = false
program = "/bin/echo"
args = ["v1"]
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
	sameFP := fpRE.FindString(w.pw("plan", "same", "--target", "staging", "--key", key("agent")))
	w.pw("gera", "go", fp, "--key", key("gera"))
	w.pw("run", fp)
	data, err := os.ReadFile(filepath.Join(w.dir, "state", "journal", "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	w.journal = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	load := func(id string) *keys.Private {
		k, err := keys.Load(key(id))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	w.runner = load("runner")
	agent, gera := load("agent"), load("gera")
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if res, sum := chReplay(t, policy, nil, w.journal); !sum.OK {
		t.Fatalf("the untouched journal: %v", chProblems(res))
	}
	deploy := -1
	for i, l := range w.journal {
		if _, r, err := receipts.Decode([]byte(l)); err == nil && r.Intent != nil && r.Intent.Fingerprint == fp {
			deploy = i
		}
	}
	if deploy < 0 {
		t.Fatal("no intent of the deploy")
	}
	st, err := store.OpenDir(filepath.Join(w.dir, "state", "store"))
	if err != nil {
		t.Fatal(err)
	}
	sameEnv, err := st.GetPlan(sameFP)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("v1\n"))
	sameOut := "sha256:" + hex.EncodeToString(sum[:])

	for _, tc := range []struct {
		name  string
		carry func(seen *operations.PreconditionSeen, real *approval.Envelope)
	}{
		{"the harmless check's plan", func(seen *operations.PreconditionSeen, _ *approval.Envelope) { seen.CheckPlan = sameEnv }},
		{"the real check's plan", func(seen *operations.PreconditionSeen, real *approval.Envelope) { seen.CheckPlan = real }},
		{"no check plan", func(seen *operations.PreconditionSeen, _ *approval.Envelope) { seen.CheckPlan = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := w.edit(w.journal, deploy, w.runner, true, func(r *receipts.Receipt) {
				in := r.Intent
				plan, _, err := policy.DecodePlan(in.Plan)
				if err != nil {
					t.Fatal(err)
				}
				// The agent's plan: precondition "ver", bound to the
				// plan of "same".
				plan.Precondition = &operations.PreconditionBound{Check: "ver", CheckFingerprint: sameFP, OutputSHA256: sameOut}
				plan.Fingerprint = operations.Fingerprint(&plan.Bound)
				penv, err := approval.Sign(agent, approval.TypePlan, plan)
				if err != nil {
					t.Fatal(err)
				}
				now := r.Time.UTC()
				genv, err := approval.Sign(gera, approval.TypeGera, approval.GeraDecision{Fingerprint: plan.Fingerprint, Decision: approval.Go, Uses: 1,
					Decider: "gera", Issued: now.Add(-time.Minute), Expires: now.Add(time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				gid, err := approval.ID(genv)
				if err != nil {
					t.Fatal(err)
				}
				real := in.Precondition.CheckPlan
				in.Plan, in.Fingerprint, in.Evidence, in.Anchor, in.Relied = penv, plan.Fingerprint, []*approval.Envelope{genv}, gid, []string{gid}
				in.Precondition = &operations.PreconditionSeen{CheckFingerprint: sameFP, RunID: in.Precondition.RunID, OutputSHA256: sameOut}
				tc.carry(in.Precondition, real)
			})
			res, sum := chReplay(t, policy, nil, lines)
			if sum.OK {
				t.Fatal("replay passes a run whose precondition binds a check that is not the operation's")
			}
			r := res[deploy]
			if len(r.Problems) != 1 || r.Problems[0].Code != receipts.GateNotSatisfied || !strings.Contains(r.Problems[0].Detail, "precondition_changed") {
				t.Fatalf("line %d: %+v; want gate_not_satisfied, precondition_changed", deploy+1, r.Problems)
			}
		})
	}
}
