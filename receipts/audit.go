package receipts

import (
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// WouldRefuse is an audit finding: a run the proposed policy or registry
// would have refused. It never fails a replay
// (docs/adr/0022-policy-dry-run.md).
const WouldRefuse = "would_refuse"

// Audit is a proposed trust policy and/or registry: replay asks the gate
// whether each run it lets through would also have passed under them, and
// reports those that would not, without failing (`replay --policy`), so a
// tightening is rolled out knowingly (docs/REPLAY.md, "Dry-run of a policy
// change").
type Audit struct {
	// Policy is the proposed trust policy; nil keeps the one each run is
	// judged by.
	Policy *approval.Policy
	// Ops is the proposed registry by operation name; nil keeps the
	// definition each run carries.
	Ops map[string]*operations.Operation
}

// judge evaluates the run of in, at its time, by the proposed rules. A
// proposed definition is judged by its rules (paths, approvers, mutating),
// not by its digest: a changed definition has another digest, and the
// question is whether this run's evidence would have satisfied it.
func (a *Audit) judge(res *Result, in *Intent, plan *operations.Plan, policy *approval.Policy, at time.Time) {
	op := in.Operation
	if a.Ops != nil {
		next, ok := a.Ops[plan.Operation]
		if !ok {
			res.Audit = append(res.Audit, Problem{Code: WouldRefuse, Detail: string(refusal.OperationAbsent) + ": the proposed registry has no operation " + plan.Operation})
			return
		}
		c := *next
		c.Digest = plan.OperationDigest
		op = &c
	}
	if a.Policy != nil {
		policy = a.Policy
	}
	// The same question replay's own judgement asks (gateInput), the
	// break-glass history included: a proposal that no longer counts a
	// review the gate relied on would refuse the break-glass after it.
	_, err := approval.Evaluate(gateInput(in, policy, op, at))
	if err == nil {
		return
	}
	p := Problem{Code: WouldRefuse, Detail: err.Error()}
	if r, ok := refusal.As(err); ok {
		p.Detail = string(r.Code) + ": " + r.Reason
	}
	res.Audit = append(res.Audit, p)
}
