package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// generateJournal writes n receipts (n/2 runs of distinct plans, each
// approved by its own Gera go) that replay must accept, and the trust policy
// that judges them. It returns the policy's path and the average number of
// distinct signatures a receipt carries.
func generateJournal(dir, path string, n int) (string, float64, error) {
	runner, agent, gera := keys.FromSeed(seed(1)), keys.FromSeed(seed(2)), keys.FromSeed(seed(3))
	trust := fmt.Sprintf(`[[principal]]
id = "runner"
roles = ["runner"]
key = %q

[[principal]]
id = "agent"
roles = ["agent"]
key = %q

[[principal]]
id = "gera"
roles = ["gera"]
key = %q
`, runner.Public(), agent.Public(), gera.Public())
	trustPath := filepath.Join(dir, "trust.toml")
	if err := os.WriteFile(trustPath, []byte(trust), 0o644); err != nil {
		return "", 0, err
	}
	policy, err := approval.ParsePolicy(trustPath, []byte(trust))
	if err != nil {
		return "", 0, err
	}
	registry := []byte(`
[[operation]]
name = "noop"
program = "/bin/true"
args = ["{param.n}"]
targets = ["staging"]
[operation.params.n]
pattern = "[0-9]+"
`)
	ops, err := operations.Parse("bench.toml", registry)
	if err != nil {
		return "", 0, err
	}
	// The registry replay judges the definitions by (issue 19).
	if err := os.MkdirAll(filepath.Join(dir, "operations"), 0o755); err != nil {
		return "", 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "operations", "bench.toml"), registry, 0o644); err != nil {
		return "", 0, err
	}
	op := ops[0]
	op.ProgramPath = "/bin/true"

	f, err := os.Create(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	t0 := time.Now().UTC().Add(-time.Hour)
	prev, seq, sigs := "", uint64(0), 0
	emit := func(r *receipts.Receipt) error {
		seq++
		r.Seq, r.Prev, r.Runner = seq, prev, "runner"
		env, err := approval.Sign(runner, receipts.PayloadType, r)
		if err != nil {
			return err
		}
		line, err := json.Marshal(env)
		if err != nil {
			return err
		}
		prev = receipts.LineHash(line)
		sigs++
		w.Write(line)
		return w.WriteByte('\n')
	}
	for i := 0; seq < uint64(n); i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		b := operations.Bound{
			Operation: op.Name, OperationDigest: op.Digest, Target: "staging",
			Params: map[string]string{"n": fmt.Sprint(i)}, Argv: op.Argv("staging", map[string]string{"n": fmt.Sprint(i)}, operations.FilePlaceholder),
			ProgramSHA256: "sha256:" + fmt.Sprintf("%064x", 1), Cwd: "/", Env: []operations.EnvVar{}, Files: []operations.File{},
		}
		plan := &operations.Plan{Version: operations.PlanVersion, Fingerprint: operations.Fingerprint(&b), Bound: b, Mutating: true, Planner: "agent", Created: now}
		planEnv, err := approval.Sign(agent, approval.TypePlan, plan)
		if err != nil {
			return "", 0, err
		}
		goEnv, err := approval.Sign(gera, approval.TypeGera, approval.GeraDecision{
			Fingerprint: plan.Fingerprint, Decision: approval.Go, Uses: 1, Decider: "gera", Issued: now, Expires: now.Add(time.Hour),
		})
		if err != nil {
			return "", 0, err
		}
		dec, err := approval.Evaluate(approval.Input{Plan: planEnv, Evidence: []*approval.Envelope{goEnv}, Policy: policy, Op: op, Now: now})
		if err != nil {
			return "", 0, fmt.Errorf("generated run %d does not pass the gate: %w", i, err)
		}
		runID := fmt.Sprintf("%024x", i)
		if err := emit(&receipts.Receipt{Kind: receipts.KindIntent, Time: now, RunID: runID, Intent: &receipts.Intent{
			Fingerprint: plan.Fingerprint, Operation: op, Plan: planEnv, Evidence: []*approval.Envelope{goEnv},
			Path: dec.Path, Anchor: dec.Anchor, Relied: []string{dec.Anchor}, PolicyDigest: policy.Digest,
			Signers: map[string]string{"agent": agent.Public().String(), "gera": gera.Public().String()},
		}}); err != nil {
			return "", 0, err
		}
		sigs += 2
		intentHash := prev
		if seq < uint64(n) {
			if err := emit(&receipts.Receipt{Kind: receipts.KindOutcome, Time: now, RunID: runID, Outcome: &receipts.Outcome{Intent: intentHash}}); err != nil {
				return "", 0, err
			}
		}
	}
	if err := w.Flush(); err != nil {
		return "", 0, err
	}
	return trustPath, float64(sigs) / float64(seq), nil
}

func seed(b byte) []byte {
	s := make([]byte, 32)
	s[0] = b
	return s
}
