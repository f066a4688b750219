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
// approved by its own Gera go that lives an hour, one run every -spacing)
// that replay must accept, and the trust policy
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
	op, err := benchOp(dir)
	if err != nil {
		return "", 0, err
	}

	jw, err := createJournal(path, runner)
	if err != nil {
		return "", 0, err
	}
	defer jw.f.Close()
	// Run i at t0 + i·spacing, the last an hour ago.
	t0 := time.Now().UTC().Add(-time.Hour - time.Duration(n/2)**spacing)
	sigs := 0
	for i := 0; jw.seq < uint64(n); i++ {
		now := t0.Add(time.Duration(i) * *spacing)
		plan := noopPlan(op, i, now)
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
		runID := receipts.NewRunID(now)
		if err := jw.emit(&receipts.Receipt{Kind: receipts.KindIntent, Time: now, RunID: runID, Intent: &receipts.Intent{
			Fingerprint: plan.Fingerprint, Operation: op, Plan: planEnv, Evidence: []*approval.Envelope{goEnv},
			Path: dec.Path, Anchor: dec.Anchor, Relied: []string{dec.Anchor}, PolicyDigest: policy.Digest,
			Signers: map[string]string{"agent": agent.Public().String(), "gera": gera.Public().String()},
		}}); err != nil {
			return "", 0, err
		}
		sigs += 3 // the runner's, the plan's and the go's
		if jw.seq < uint64(n) {
			if err := jw.emit(&receipts.Receipt{Kind: receipts.KindOutcome, Time: now, RunID: runID, Outcome: &receipts.Outcome{Intent: jw.prev}}); err != nil {
				return "", 0, err
			}
			sigs++
		}
	}
	if err := jw.close(); err != nil {
		return "", 0, err
	}
	return trustPath, float64(sigs) / float64(jw.seq), nil
}

// journalWriter appends receipts to a journal as the runner does: each
// numbered, chained to the line before and signed by the runner.
// benchHost is the host of the generated journals' receipts: their
// checkpoint notes' origin is prod-write/receipts/bench-host.
const benchHost = "bench-host"

type journalWriter struct {
	f      *os.File
	w      *bufio.Writer
	runner *keys.Private
	prev   string // the hash of the last line written
	seq    uint64
}

func createJournal(path string, runner *keys.Private) (*journalWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &journalWriter{f: f, w: bufio.NewWriterSize(f, 1<<20), runner: runner}, nil
}

func (jw *journalWriter) emit(r *receipts.Receipt) error {
	jw.seq++
	r.Seq, r.Prev, r.Runner, r.Host = jw.seq, jw.prev, "runner", benchHost
	env, err := approval.Sign(jw.runner, receipts.PayloadType, r)
	if err != nil {
		return err
	}
	line, err := json.Marshal(env)
	if err != nil {
		return err
	}
	jw.prev = receipts.LineHash(line)
	jw.w.Write(line)
	return jw.w.WriteByte('\n')
}

// close flushes and closes the journal; a deferred f.Close covers the
// paths that return before it.
func (jw *journalWriter) close() error {
	if err := jw.w.Flush(); err != nil {
		return err
	}
	return jw.f.Close()
}

// benchRegistry is the one operation of the generated journals: /bin/true
// with a distinct parameter per run, on either usual approval path.
var benchRegistry = []byte(`
[[operation]]
name = "noop"
program = "/bin/true"
args = ["{param.n}"]
targets = ["staging"]
[operation.params.n]
pattern = "[0-9]+"
`)

// benchOp parses benchRegistry and writes it into dir's registry, which
// replay judges the definitions by.
func benchOp(dir string) (*operations.Operation, error) {
	ops, err := operations.Parse("bench.toml", benchRegistry)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "operations"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "operations", "bench.toml"), benchRegistry, 0o644); err != nil {
		return nil, err
	}
	op := ops[0]
	op.ProgramPath = "/bin/true"
	return op, nil
}

// noopPlan is agent's plan of run i of op (parameter n = i), made at now.
func noopPlan(op *operations.Operation, i int, now time.Time) *operations.Plan {
	params := map[string]string{"n": fmt.Sprint(i)}
	b := operations.Bound{
		Operation: op.Name, OperationDigest: op.Digest, Target: "staging",
		Params: params, Argv: op.Argv("staging", params, operations.FilePlaceholder),
		ProgramSHA256: "sha256:" + fmt.Sprintf("%064x", 1), Cwd: "/", Env: []operations.EnvVar{}, Files: []operations.File{},
	}
	return &operations.Plan{Version: operations.PlanVersion, Fingerprint: operations.Fingerprint(&b), Bound: b, Mutating: true, Planner: "agent", Created: now}
}

func seed(b byte) []byte {
	s := make([]byte, 32)
	s[0] = b
	return s
}
