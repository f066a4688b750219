package plans

import (
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// Report is what status knows about a stored plan: the API returns it as
// its [Report.Result].
type Report struct {
	Plan *operations.Plan
	// Decision is the gate's, with every piece of evidence assessed; nil
	// when the plan itself could not be judged.
	Decision *approval.Decision
	Problems []store.Problem
	// Refusal says why run would not pass the gate now; nil when it would.
	Refusal *refusal.Error
	// Request is the plan's decision request; nil when it needs none.
	Request *bridge.DecisionRequest
	// Files are what the plan's files hold, as approvers are shown them.
	Files   []bridge.FileDiff
	gateErr error
	// policyDigest and op are what the gate judged by, for explain.
	policyDigest string
	op           *operations.Operation
	now          time.Time
}

// explain answers "why would this be allowed?" before a run.
func (s *Report) explain() *approval.Explanation {
	return approval.ExplainDecision(s.Decision, s.op, s.policyDigest, len(s.Problems), s.Refusal, s.now)
}

// Status judges the plan stored under fp as run would now, hashing
// through dg. A gate that says no is not an error here: it is the report's
// Refusal. The error is for a plan that cannot be loaded or judged at all.
func Status(d *Deps, fp string, dg operations.Digester) (*Report, error) {
	pc, err := d.Runner.Load(fp)
	if err != nil {
		return nil, err
	}
	now := d.Runner.Now()
	dec, problems, gateErr := judge(d.Runner, pc, dg, now)
	r, refused := refusal.As(gateErr)
	if gateErr != nil && !refused {
		return nil, gateErr
	}
	req, err := requestOf(pc, dec, r, now)
	if err != nil {
		return nil, err
	}
	// What the plan's files hold, from the content kept with it, as the
	// bridges show approvers (docs/adr/0063-file-content-kept-with-the-plan.md).
	rules := &bridge.DiffRules{Roots: pc.Config.Bridge.DiffRoots}
	files := rules.Diffs(pc.Plan, pc.Op, bridge.Contents(pc.Store, pc.Policy, pc.Registry, pc.Envelope))
	return &Report{Plan: pc.Plan, Decision: dec, Problems: problems, Refusal: r, Request: req, Files: files, gateErr: gateErr, policyDigest: pc.Policy.Digest, op: pc.Op, now: now}, nil
}

// judge runs rules 2 to 6 of the gate: the fingerprint recomputed from
// reality through dg (file parameters read as rn's caller has them), then
// [approval.Evaluate] over the stored evidence.
// The decision is returned even when refused, for display.
func judge(rn *runner.Runner, pc *runner.PlanContext, dg operations.Digester, now time.Time) (*approval.Decision, []store.Problem, error) {
	evidence, problems, err := pc.Store.Evidence(pc.Plan.Fingerprint)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, 0, len(evidence))
	for _, env := range evidence {
		if id, err := approval.ID(env); err == nil {
			ids = append(ids, id)
		}
	}
	used, err := pc.Store.Used(ids)
	if err != nil {
		return nil, problems, err
	}
	// The break-glass history, as run reads it
	// (docs/adr/0028-break-glass.md).
	hist, histProblems, err := runner.BreakGlassHistory(pc.Store, pc.Policy, pc.Plan.Fingerprint, evidence)
	if err != nil {
		return nil, problems, err
	}
	counts, err := pc.SignCounts()
	if err != nil {
		return nil, problems, err
	}
	dec, gateErr := approval.Evaluate(approval.Input{
		Plan: pc.Envelope, Evidence: evidence, Unreadable: append(runner.ProblemStrings(problems), histProblems...), Policy: pc.Policy, Op: pc.Op, Now: now, Used: used, BreakGlass: hist, SignCounts: counts,
		// status does not run the precondition check; run does.
		PreconditionUnchecked: true,
	})
	if err := pc.Reality(rn, dg); err != nil {
		return dec, problems, err
	}
	// What run checks before it spends anything and that does not depend
	// on the moment: status never says "would proceed" where run refuses.
	if err := pc.Runnable(rn); err != nil {
		return dec, problems, err
	}
	return dec, problems, gateErr
}

// requestOf derives the decision request of a judged plan: nil when the
// plan needs no human. Where it was posted and what the bridges did since
// are read from the state directory; a problem reading them leaves them
// out (they decide nothing).
func requestOf(pc *runner.PlanContext, dec *approval.Decision, r *refusal.Error, now time.Time) (*bridge.DecisionRequest, error) {
	s, _, err := bridge.RequestSettings(pc.Config)
	if err != nil {
		return nil, err
	}
	posts, _ := bridge.LedgerOf(pc.Config).Posts(pc.Plan.Fingerprint)
	events, _ := bridge.EventsOf(pc.Config).List(pc.Plan.Fingerprint)
	j := &bridge.Judgement{Plan: pc.Plan, Op: pc.Op, Decision: dec, Refusal: r, Now: now}
	return j.Request(pc.Policy, posts, events, s), nil
}

// Result is the report as the API returns it (`status --json` prints it,
// the MCP status tool returns it), in JSON format formatVersion.
func (s *Report) Result(formatVersion int) *api.StatusResult {
	r := &api.StatusResult{
		Fingerprint:   s.Plan.Fingerprint,
		Operation:     s.Plan.Operation,
		Target:        s.Plan.Target,
		Planner:       s.Plan.Planner,
		Mutating:      s.Plan.Mutating,
		Allowed:       s.gateErr == nil,
		Evidence:      []*approval.Assessed{},
		Problems:      nonNil(s.Problems),
		FormatVersion: formatVersion,
		Plan:          s.Plan,
		// What the approver approves the world as
		// (docs/adr/0025-preconditions.md); status does not run the check,
		// run does.
		Precondition: s.Plan.Precondition,
		Refusal:      s.Refusal,
		Explanation:  s.explain(),
		Request:      s.Request,
		Files:        nonNil(s.Files),
	}
	if s.Decision != nil {
		r.Evidence = nonNil(s.Decision.Evidence)
		r.Path = operations.PathName(s.Decision.Path)
		r.PreconditionUnchecked = s.Decision.PreconditionUnchecked
	}
	return r
}
