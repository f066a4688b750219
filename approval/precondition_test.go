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
args = ["/tmp/{target}-{param.svc}"]
targets = ["staging"]
[operation.params.svc]
pattern = "^[a-z]+$"
[operation.precondition]
check = "version"
params = { file = "version-{param.svc}.txt" }
`))
	if err != nil {
		t.Fatalf("operations.Parse: %v", err)
	}
	return ops[0]
}

var (
	outV1 = "sha256:" + strings.Repeat("1", 64)
	outV2 = "sha256:" + strings.Repeat("2", 64)
)

// prePlan is a signed plan of op by agent, with svc=a, that binds pre
// (nil: none).
func prePlan(t tb, op *operations.Operation, pre *operations.PreconditionBound) (*operations.Plan, *approval.Envelope) {
	t.Helper()
	plan, _ := planFor(t, op, "agent", "")
	plan.Params = map[string]string{"svc": "a"}
	plan.Precondition = pre
	plan.Fingerprint = operations.Fingerprint(&plan.Bound)
	return plan, mustSign(t, "agent", approval.TypePlan, plan)
}

// checkPlan is a signed check plan as run would find one; the zero
// checkSpec is precondition "version" of a prePlan, and each field changes
// one thing.
type checkSpec struct {
	op, target, file, planner, salt string
	mutating                        bool
}

func checkPlan(t tb, c checkSpec) (*operations.Plan, *approval.Envelope) {
	t.Helper()
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&c.op, "version")
	def(&c.target, "staging")
	def(&c.file, "version-a.txt")
	def(&c.planner, "agent")
	b := operations.Bound{
		Operation:       c.op,
		OperationDigest: "sha256:" + strings.Repeat("9", 64),
		Target:          c.target,
		Params:          map[string]string{"file": c.file},
		Argv:            []string{"/bin/cat", c.file + c.salt},
		ProgramSHA256:   "sha256:" + strings.Repeat("cd", 32),
		Cwd:             "/",
		Env:             []operations.EnvVar{},
		Files:           []operations.File{},
	}
	plan := &operations.Plan{Version: operations.PlanVersion, Fingerprint: operations.Fingerprint(&b), Bound: b,
		Mutating: c.mutating, Planner: c.planner, Created: testNow.Add(-time.Hour)}
	return plan, mustSign(t, c.planner, approval.TypePlan, plan)
}

// TestPreconditionRule is the gate's precondition rule, case by case
// (docs/adr/0025-preconditions.md).
func TestPreconditionRule(t *testing.T) {
	p := mustPolicy(t, demoCast)
	op := preOp(t)
	check, cenv := checkPlan(t, checkSpec{})
	checkFP := check.Fingerprint
	bound := &operations.PreconditionBound{Check: "version", CheckFingerprint: checkFP, OutputSHA256: outV1}
	same := &operations.PreconditionSeen{CheckFingerprint: checkFP, RunID: "r", OutputSHA256: outV1, CheckPlan: cenv}
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
		{"output changed", op, bound, &operations.PreconditionSeen{CheckFingerprint: checkFP, OutputSHA256: outV2, CheckPlan: cenv}, false, refusal.PreconditionChanged},
		{"check failed", op, bound, &operations.PreconditionSeen{CheckFingerprint: checkFP, OutputSHA256: outV1, ExitCode: 1, CheckPlan: cenv}, false, refusal.PreconditionChanged},
		{"another check ran", op, bound, &operations.PreconditionSeen{CheckFingerprint: "sha256:" + strings.Repeat("d", 64), OutputSHA256: outV1, CheckPlan: cenv}, false, refusal.PreconditionChanged},
		{"no check plan", op, bound, &operations.PreconditionSeen{CheckFingerprint: checkFP, OutputSHA256: outV1}, false, refusal.PreconditionChanged},
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

// TestPreconditionCheckPlanRule: the check a plan binds, by fingerprint,
// must be the operation's precondition for this plan, judged on the check's
// own signed plan, which run hands the gate and the intent keeps for
// replay (docs/adr/0032-the-gate-judges-the-precondition-check.md). Each
// case binds its check plan honestly (its fingerprint, the output seen), so
// only the rule can refuse it.
func TestPreconditionCheckPlanRule(t *testing.T) {
	p := mustPolicy(t, demoCast)
	op := preOp(t)
	op.Approval.Paths = []string{gera}
	_, otherEnv := checkPlan(t, checkSpec{salt: "x"})
	broken := func(env *approval.Envelope) *approval.Envelope { return flipSignature(t, env, 3) }
	for _, tc := range []struct {
		name string
		spec checkSpec
		// swap, when set, replaces the check plan run saw.
		swap func(env *approval.Envelope) *approval.Envelope
		want string // "" opens
	}{
		{"the precondition's own check", checkSpec{}, nil, ""},
		{"a plan of another operation", checkSpec{op: "uptime"}, nil, "a plan of another operation"},
		{"a mutating plan", checkSpec{mutating: true}, nil, "it is mutating"},
		{"another target", checkSpec{target: "production"}, nil, "another target"},
		{"another service's check", checkSpec{file: "version-b.txt"}, nil, "params are not the precondition's"},
		{"another planner", checkSpec{planner: "pat"}, nil, "planned by pat"},
		{"a plan whose signature does not verify", checkSpec{}, broken, "does not verify"},
		{"another plan than the one bound", checkSpec{}, func(*approval.Envelope) *approval.Envelope { return otherEnv }, "is not the one the plan binds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check, cenv := checkPlan(t, tc.spec)
			if tc.swap != nil {
				cenv = tc.swap(cenv)
			}
			plan, penv := prePlan(t, op, &operations.PreconditionBound{Check: "version", CheckFingerprint: check.Fingerprint, OutputSHA256: outV1})
			seen := &operations.PreconditionSeen{CheckFingerprint: check.Fingerprint, RunID: "r", OutputSHA256: outV1, CheckPlan: cenv}
			ev := []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", 1))}
			_, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: ev, Policy: p, Op: op, Now: testNow, Precondition: seen})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !refusal.Is(err, refusal.PreconditionChanged) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want precondition_changed saying %q, got %v", tc.want, err)
			}
			// Run asks the same rule before running the check.
			if tc.swap == nil {
				if err := approval.IsPreconditionCheck(op, plan, check); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("IsPreconditionCheck: %v", err)
				}
			}
		})
	}
}

// TestChangedPreconditionNeverRuns is the property of preconditions
// (docs/adr/0025-preconditions.md): whatever the check printed, exited or
// was, and whatever approvals there are, the gate opens a plan with a
// precondition only when what run saw is exactly what the plan binds: the
// same check plan, which is the operation's precondition for the plan, exit
// 0, the same output digest.
func TestChangedPreconditionNeverRuns(t *testing.T) {
	p := mustPolicy(t, demoCast)
	op := preOp(t)
	digests := []string{outV1, outV2, "sha256:" + strings.Repeat("3", 64), ""}
	// Two check plans that are the precondition's, one that is not.
	good, goodEnv := checkPlan(t, checkSpec{})
	good2, good2Env := checkPlan(t, checkSpec{salt: "2"})
	bad, badEnv := checkPlan(t, checkSpec{file: "version-b.txt"})
	fps := []string{good.Fingerprint, bad.Fingerprint, good2.Fingerprint, ""}
	envs := map[string]*approval.Envelope{good.Fingerprint: goodEnv, good2.Fingerprint: good2Env, bad.Fingerprint: badEnv}
	rapid.Check(t, func(t *rapid.T) {
		bound := &operations.PreconditionBound{Check: "version", CheckFingerprint: rapid.SampledFrom(fps[:2]).Draw(t, "bound.fp"), OutputSHA256: rapid.SampledFrom(digests[:3]).Draw(t, "bound.out")}
		plan, penv := prePlan(t, op, bound)
		var seen *operations.PreconditionSeen
		if rapid.IntRange(0, 5).Draw(t, "seen?") > 0 {
			// Mostly the bound check and its own plan, so that the other
			// draws (exit, output) decide often.
			seenFP := bound.CheckFingerprint
			if rapid.IntRange(0, 3).Draw(t, "seen.fp other?") == 0 {
				seenFP = rapid.SampledFrom(fps).Draw(t, "seen.fp")
			}
			seenPlan := seenFP
			if rapid.IntRange(0, 3).Draw(t, "seen.plan other?") == 0 {
				seenPlan = rapid.SampledFrom(fps).Draw(t, "seen.plan")
			}
			seen = &operations.PreconditionSeen{
				CheckFingerprint: seenFP,
				OutputSHA256:     rapid.SampledFrom(digests).Draw(t, "seen.out"),
				ExitCode:         rapid.SampledFrom([]int{0, 0, 1, 124}).Draw(t, "seen.exit"),
				RunID:            "r",
				CheckPlan:        envs[seenPlan],
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
		unchanged := seen != nil && seen.CheckFingerprint == bound.CheckFingerprint && seen.ExitCode == 0 && seen.OutputSHA256 == bound.OutputSHA256 &&
			seen.CheckPlan == envs[bound.CheckFingerprint] && bound.CheckFingerprint != bad.Fingerprint
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

// What run saw names another check than the plan binds, while carrying
// the bound check's own plan (an intent whose two fields disagree): the
// gate refuses it, whatever the check printed. The property above draws
// this case only now and then.
func TestSeenCheckThatIsNotTheBoundOneNeverRuns(t *testing.T) {
	p := mustPolicy(t, demoCast)
	op := preOp(t)
	good, goodEnv := checkPlan(t, checkSpec{})
	other, _ := checkPlan(t, checkSpec{salt: "2"})
	bound := &operations.PreconditionBound{Check: "version", CheckFingerprint: good.Fingerprint, OutputSHA256: outV1}
	plan, penv := prePlan(t, op, bound)
	ev := []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", 1))}
	seen := &operations.PreconditionSeen{CheckFingerprint: other.Fingerprint, OutputSHA256: outV1, ExitCode: 0, RunID: "r", CheckPlan: goodEnv}
	_, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: ev, Policy: p, Op: op, Now: testNow, Precondition: seen})
	if !refusal.Is(err, refusal.PreconditionChanged) {
		t.Fatalf("a seen check %s that is not the bound %s: %v, want precondition_changed", other.Fingerprint, good.Fingerprint, err)
	}
	seen.CheckFingerprint = good.Fingerprint
	if _, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: ev, Policy: p, Op: op, Now: testNow, Precondition: seen}); err != nil {
		t.Fatalf("the bound check, as bound: %v", err)
	}
}
