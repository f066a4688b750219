package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/receipts"
)

// passkeyRun is one generated run's plan and evidence, as the gate passed
// them.
type passkeyRun struct {
	plan             *operations.Plan
	planEnv          *approval.Envelope
	record, approval *approval.Envelope
	dec              *approval.Decision
	now              time.Time
	err              error
}

// generatePasskeyJournal writes n receipts (n/2 runs of distinct plans, each
// approved by alice's passkey answering smith's certainty record) that
// replay must accept, and the trust policy that judges them. It returns
// the policy's path and the average numbers of distinct ed25519 signatures
// and of P-256 assertions a receipt carries.
//
// Each run needs its own assertion and a gate evaluation, so the runs are
// made in batches by every core; the runner then signs and chains them in
// order, as the journal must be.
func generatePasskeyJournal(dir, path string, n int) (string, float64, float64, error) {
	c, err := newPasskeyCast()
	if err != nil {
		return "", 0, 0, err
	}
	trust, err := c.trust(true)
	if err != nil {
		return "", 0, 0, err
	}
	trustPath := filepath.Join(dir, "trust.toml")
	if err := os.WriteFile(trustPath, []byte(trust), 0o644); err != nil {
		return "", 0, 0, err
	}
	policy, err := approval.ParsePolicy(trustPath, []byte(trust))
	if err != nil {
		return "", 0, 0, fmt.Errorf("the passkey journal's trust policy: %w", err)
	}
	op, err := benchOp(dir)
	if err != nil {
		return "", 0, 0, err
	}
	jw, err := createJournal(path, c.runner)
	if err != nil {
		return "", 0, 0, err
	}
	defer jw.f.Close()
	signers := map[string]string{"agent": c.agent.Public().String(), "smith": c.smith.Public().String(), "bridge": c.bridge.Public().String()}
	t0 := time.Now().UTC().Add(-time.Hour)
	runs := (n + 1) / 2
	edSigs, assertions := 0, 0
	const batch = 1024
	made := make([]passkeyRun, batch)
	for start := 0; start < runs; start += batch {
		m := min(batch, runs-start)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range runtime.GOMAXPROCS(0) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := int(next.Add(1) - 1); j < m; j = int(next.Add(1) - 1) {
					made[j] = c.passkeyRun(policy, op, start+j, t0)
				}
			}()
		}
		wg.Wait()
		for j := range m {
			pr, i := &made[j], start+j
			if pr.err != nil {
				return "", 0, 0, fmt.Errorf("generated run %d: %w", i, pr.err)
			}
			var relied []string
			for _, s := range pr.dec.Relied {
				relied = append(relied, s.ID)
			}
			runID := fmt.Sprintf("%024x", i)
			if err := jw.emit(&receipts.Receipt{Kind: receipts.KindIntent, Time: pr.now, RunID: runID, Intent: &receipts.Intent{
				Fingerprint: pr.plan.Fingerprint, Operation: op, Plan: pr.planEnv, Evidence: []*approval.Envelope{pr.record, pr.approval},
				Path: pr.dec.Path, Anchor: pr.dec.Anchor, Relied: relied, PolicyDigest: policy.Digest, Signers: signers,
			}}); err != nil {
				return "", 0, 0, err
			}
			// The runner's, the plan's, the record's and the bridge's
			// envelope of the passkey decision; and its assertion.
			edSigs, assertions = edSigs+4, assertions+1
			if jw.seq < uint64(n) {
				if err := jw.emit(&receipts.Receipt{Kind: receipts.KindOutcome, Time: pr.now, RunID: runID, Outcome: &receipts.Outcome{Intent: jw.prev}}); err != nil {
					return "", 0, 0, err
				}
				edSigs++
			}
		}
	}
	if err := jw.close(); err != nil {
		return "", 0, 0, err
	}
	return trustPath, float64(edSigs) / float64(jw.seq), float64(assertions) / float64(jw.seq), nil
}

// passkeyRun makes run i: its plan, smith's record and alice's passkey
// approval of it, and checks that the gate passes them as run would, with
// the sign count the store would hold.
func (c *passkeyCast) passkeyRun(policy *approval.Policy, op *operations.Operation, i int, t0 time.Time) passkeyRun {
	now := t0.Add(time.Duration(i) * time.Millisecond)
	pr := passkeyRun{plan: noopPlan(op, i, now), now: now}
	if pr.planEnv, pr.err = approval.Sign(c.agent, approval.TypePlan, pr.plan); pr.err != nil {
		return pr
	}
	var record string
	if pr.record, record, pr.err = c.record(pr.plan, now); pr.err != nil {
		return pr
	}
	// Run i's assertion is the credential's (i+1)th: the sign counts rise
	// along the journal, as replay checks. A copy per run, since runs are
	// made concurrently.
	auth := *c.auth
	auth.Count = uint32(i)
	if pr.approval, pr.err = c.passkeyApproval(&auth, pr.plan, record, fmt.Appendf(nil, "bench nonce %d", i), now); pr.err != nil {
		return pr
	}
	in := approval.Input{Plan: pr.planEnv, Evidence: []*approval.Envelope{pr.record, pr.approval}, Policy: policy, Op: op, Now: now,
		SignCounts: map[string]uint32{c.auth.CredentialID(): uint32(i)}}
	if pr.dec, pr.err = approval.Evaluate(in); pr.err != nil {
		pr.err = fmt.Errorf("does not pass the gate: %w", pr.err)
	}
	return pr
}
