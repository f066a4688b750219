package approval

import (
	"fmt"
	"maps"

	"github.com/prod-write/prod-write/operations"
)

// IsPreconditionCheck returns nil when check is a plan of the precondition
// op declares for plan, and otherwise an error saying how it is not: the
// declared check operation, not mutating, on plan's target, with the
// declared params expanded from plan's, planned by plan's planner. A plan
// names its check by fingerprint only, so without this rule an agent could
// bind the plan of a harmless check whose output never changes. Run calls
// it before running the check; the gate calls it on the check plan run
// saw, which the intent keeps, so replay judges it too
// (docs/adr/0032-the-gate-judges-the-precondition-check.md).
func IsPreconditionCheck(op *operations.Operation, plan, check *operations.Plan) error {
	if op.Precondition == nil {
		return fmt.Errorf("operation %s declares no precondition", op.Name)
	}
	name, params := op.PreconditionRequest(plan.Target, plan.Params)
	var why string
	switch {
	case check.Operation != name:
		why = "it is a plan of another operation"
	case check.Mutating:
		why = "it is mutating"
	case check.Target != plan.Target:
		why = "it runs on another target"
	case !maps.Equal(check.Params, params):
		why = "its params are not the precondition's for this plan"
	case check.Planner != plan.Planner:
		why = fmt.Sprintf("it was planned by %s, the plan by %s", check.Planner, plan.Planner)
	default:
		return nil
	}
	return fmt.Errorf("the check the plan binds (%s on %s) is not precondition %s of this plan: %s", check.Operation, check.Target, name, why)
}
