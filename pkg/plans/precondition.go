package plans

import (
	"errors"
	"fmt"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// Preconditions (docs/adr/0025-preconditions.md): plan runs an
// operation's precondition check through the run order (pkg/runner) to
// learn the digest of its output, which the plan then binds; run runs it
// again before anything is consumed (runner.Runner.Run).

// bindPrecondition plans the operation's precondition check (signed by the
// same planner, stored), runs it, and binds its output into plan, whose
// fingerprint changes accordingly.
func bindPrecondition(rn *runner.Runner, reg *operations.Registry, op *operations.Operation, plan *operations.Plan, req operations.Request, signer *keys.Private, planner string, st store.Store) error {
	name, params := op.PreconditionRequest(plan.Target, plan.Params)
	creq := req
	creq.Operation, creq.Params, creq.Files = name, params, nil
	check, err := reg.Resolve(creq, operations.HashDigester{})
	if err != nil {
		if r, ok := refusal.As(err); ok {
			r.Reason = "precondition check " + name + ": " + r.Reason
		}
		return err
	}
	check.Planner, check.Created = planner, rn.Now().UTC()
	env, err := approval.Sign(signer, approval.TypePlan, check)
	if err != nil {
		return err
	}
	if err := st.PutPlan(check.Fingerprint, env); err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("storing the precondition check's plan: %w", err)
	}
	seen, out, err := rn.RunCheck(check.Fingerprint)
	if err != nil {
		return fmt.Errorf("running precondition check %s: %w", name, err)
	}
	if seen.ExitCode != 0 {
		return &operations.InputError{Err: fmt.Errorf("precondition check %s exited %d (its receipts: run %s): nothing was planned", name, seen.ExitCode, seen.RunID)}
	}
	plan.Precondition = &operations.PreconditionBound{Check: name, CheckFingerprint: check.Fingerprint, OutputSHA256: seen.OutputSHA256}
	if s, ok := out.Whole(); ok && op.Precondition.ShowOutput {
		plan.PreconditionOutput = &s
	}
	plan.Fingerprint = operations.Fingerprint(&plan.Bound)
	return nil
}
