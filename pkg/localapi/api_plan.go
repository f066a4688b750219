package localapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/plans"
)

// plan on the application API (docs/API.md): in-process, through the
// runner service, and the service's answer to it.

func (a API) Plan(_ context.Context, req api.PlanRequest) (*api.PlanResult, error) {
	d := a.Env.Plans()
	if a.Env.HasKey() {
		d.Actor = a.Env.Actor
	}
	p, err := plans.Plan(d, req, operations.HashDigester{Progress: a.Progress})
	var usage *plans.UsageError
	var input *plans.InputError
	switch {
	case errors.As(err, &usage):
		return nil, &UsageError{Msg: usage.Msg}
	case errors.As(err, &input):
		return nil, PlanInput(input.Err)
	case err != nil:
		return nil, err
	}
	return p.Result(FormatVersion), nil
}

// Plan hands each file over as a descriptor the client opens, as the
// caller (docs/DESIGN.md §13): the service reads those, never a path.
func (a ServiceClient) Plan(ctx context.Context, req api.PlanRequest) (*api.PlanResult, error) {
	var files []handover
	for name, path := range req.Files {
		files = append(files, handover{name: "file:" + name, path: path})
	}
	var r api.PlanResult
	if err := callInto(ctx, a, api.CallPlan, req, files, &r); err != nil {
		// The answer carries the refusal, not its wrapping: a plan's
		// param_invalid is bad input (exit 65) here as in the service.
		return nil, PlanInput(err)
	}
	if r.Plan == nil {
		return nil, errors.New("the runner service's plan holds no plan")
	}
	// The client checks what it is told, as it checks the registry: a
	// fingerprint its own inputs do not give is no plan at all.
	if err := r.Plan.Check(); err != nil {
		return nil, fmt.Errorf("the runner service's plan: %w", err)
	}
	return &r, nil
}
