package approval_test

import (
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// preOp is the operation "touch" with a precondition check "version".
func preOp(t tb) *operations.Operation {
	t.Helper()
	ops, err := operations.Parse("ops.toml", []byte(`
[[operation]]
name = "touch"
description = "touch a file"
program = "/usr/bin/touch"
args = ["/tmp/{target}"]
targets = ["staging"]
[operation.precondition]
check = "version"
`))
	if err != nil {
		t.Fatalf("operations.Parse: %v", err)
	}
	return ops[0]
}

var (
	checkFP = "sha256:" + strings.Repeat("c", 64)
	outV1   = "sha256:" + strings.Repeat("1", 64)
	outV2   = "sha256:" + strings.Repeat("2", 64)
)

// prePlan is a signed plan of op by agent that binds pre (nil: none).
func prePlan(t tb, op *operations.Operation, pre *operations.PreconditionBound) (*operations.Plan, *approval.Envelope) {
	t.Helper()
	plan, _ := planFor(t, op, "agent", "")
	plan.Precondition = pre
	plan.Fingerprint = operations.Fingerprint(&plan.Bound)
	return plan, mustSign(t, "agent", approval.TypePlan, plan)
}

// TestPreconditionRule is the gate's rule of issue 22, case by case.
func TestPreconditionRule(t *testing.T) {
	p := mustPolicy(t, demoCast)
	op := preOp(t)
	bound := &operations.PreconditionBound{Check: "version", CheckFingerprint: checkFP, OutputSHA256: outV1}
	same := &operations.PreconditionSeen{CheckFingerprint: checkFP, RunID: "r", OutputSHA256: outV1}
	plain := mustOp(t, 1, []string{gera}, true)
	for _, tc := range []struct {
		name      string
		op        *operations.Operation
		pre       *operations.PreconditionBound
		seen      *operations.PreconditionSeen
		unchecked bool
		want      refusal.Code // "" allowed
	}{
		{"unchanged", op, bound, same, false, ""},
		{"output changed", op, bound, &operations.PreconditionSeen{CheckFingerprint: checkFP, OutputSHA256: outV2}, false, refusal.PreconditionChanged},
		{"check failed", op, bound, &operations.PreconditionSeen{CheckFingerprint: checkFP, OutputSHA256: outV1, ExitCode: 1}, false, refusal.PreconditionChanged},
		{"another check ran", op, bound, &operations.PreconditionSeen{CheckFingerprint: "sha256:" + strings.Repeat("d", 64), OutputSHA256: outV1}, false, refusal.PreconditionChanged},
		{"not re-checked", op, bound, nil, false, refusal.PreconditionChanged},
		{"plan binds none", op, nil, same, false, refusal.PreconditionChanged},
		{"plan binds another check", op, &operations.PreconditionBound{Check: "other", CheckFingerprint: checkFP, OutputSHA256: outV1}, same, false, refusal.PreconditionChanged},
		{"status: unchecked", op, bound, nil, true, ""},
		{"operation has none, plan binds one", plain, bound, same, false, refusal.FingerprintMismatch},
		{"operation has none", plain, nil, nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := *tc.op
			o.Approval.Paths = []string{gera}
			// The plan binds the definition's digest as it was parsed.
			plan, penv := prePlan(t, &o, tc.pre)
			ev := []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", 1))}
			d, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: ev, Policy: p, Op: &o, Now: testNow, Precondition: tc.seen, PreconditionUnchecked: tc.unchecked})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if d.PreconditionUnchecked != (tc.unchecked && tc.pre != nil) {
					t.Errorf("PreconditionUnchecked = %v", d.PreconditionUnchecked)
				}
				return
			}
			if !refusal.Is(err, tc.want) {
				t.Fatalf("want %s, got %v", tc.want, err)
			}
		})
	}
}

// TestChangedPreconditionNeverRuns is the property of issue 22: whatever
// the check printed, exited or was, and whatever approvals there are, the
// gate opens a plan with a precondition only when what run saw is exactly
// what the plan binds: the same check plan, exit 0, the same output digest.
func TestChangedPreconditionNeverRuns(t *testing.T) {
	p := mustPolicy(t, demoCast)
	op := preOp(t)
	digests := []string{outV1, outV2, "sha256:" + strings.Repeat("3", 64), ""}
	fps := []string{checkFP, "sha256:" + strings.Repeat("e", 64), ""}
	rapid.Check(t, func(t *rapid.T) {
		bound := &operations.PreconditionBound{Check: "version", CheckFingerprint: rapid.SampledFrom(fps[:2]).Draw(t, "bound.fp"), OutputSHA256: rapid.SampledFrom(digests[:3]).Draw(t, "bound.out")}
		plan, penv := prePlan(t, op, bound)
		var seen *operations.PreconditionSeen
		if rapid.IntRange(0, 5).Draw(t, "seen?") > 0 {
			seen = &operations.PreconditionSeen{
				CheckFingerprint: rapid.SampledFrom(fps).Draw(t, "seen.fp"),
				OutputSHA256:     rapid.SampledFrom(digests).Draw(t, "seen.out"),
				ExitCode:         rapid.SampledFrom([]int{0, 0, 1, 124}).Draw(t, "seen.exit"),
				RunID:            "r",
			}
		}
		var ev []*approval.Envelope
		if rapid.Bool().Draw(t, "go") {
			ev = append(ev, mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", rapid.IntRange(1, 3).Draw(t, "uses"))))
		}
		if rapid.Bool().Draw(t, "record") {
			rec := smithRecord(plan.Fingerprint, "smith")
			renv := mustSign(t, "smith", approval.TypeSmith, rec)
			ev = append(ev, renv, mustSign(t, "alice", approval.TypeTrinity, answer(plan.Fingerprint, mustID(t, renv), approval.Approve, "alice")))
		}
		_, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: ev, Policy: p, Op: op, Now: testNow.Add(time.Duration(rapid.IntRange(0, 30).Draw(t, "min")) * time.Minute), Precondition: seen})
		unchanged := seen != nil && seen.CheckFingerprint == bound.CheckFingerprint && seen.ExitCode == 0 && seen.OutputSHA256 == bound.OutputSHA256
		if !unchanged && err == nil {
			t.Fatalf("the gate opened on a changed precondition: bound %+v, seen %+v", bound, seen)
		}
		if !unchanged && !refusal.Is(err, refusal.PreconditionChanged) {
			t.Fatalf("changed precondition refused as %v, not precondition_changed", err)
		}
		if unchanged && refusal.Is(err, refusal.PreconditionChanged) {
			t.Fatalf("unchanged precondition refused: %v", err)
		}
	})
}
