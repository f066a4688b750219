package localapi

import (
	"context"
	"errors"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/plans"
)

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
