package localapi

import (
	"context"
	"errors"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/plans"
)

func (a API) Wait(ctx context.Context, req api.WaitRequest) (*api.WaitResult, error) {
	var deadline time.Time
	if req.Timeout > 0 {
		deadline = a.Env.Now().Add(req.Timeout)
	}
	s, err := plans.Wait(ctx, a.Env.Plans(), req.Fingerprint, deadline, operations.HashDigester{Progress: a.Progress}, func(s *plans.Report) {
		if req.Progress != nil {
			req.Progress(s.Result(FormatVersion))
		}
	})
	pending := s != nil && (errors.Is(err, plans.ErrWaitTimeout) || (ctx.Err() != nil && errors.Is(err, ctx.Err())))
	if err != nil && !pending {
		return nil, err
	}
	return &api.WaitResult{Status: s.Result(FormatVersion), Pending: pending}, nil
}
