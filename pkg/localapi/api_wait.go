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

// ServeWait is a typed wait inside the service: at most serviceWaitMax,
// ended early when the client goes (nobody reads the answer) or the
// service stops (a wait holds no stop: answered as pending, the client
// asks again, of the service that replaces this one or of none).
func ServeWait(f *Env, a API, req api.WaitRequest) (*api.WaitResult, error) {
	if req.Timeout <= 0 || req.Timeout > ServiceWaitMax {
		req.Timeout = ServiceWaitMax
	}
	ctx, cancel := f.ClientContext()
	defer cancel()
	// The client says it waits once told: from here a stop or its going
	// ends this wait (ctx), and the log says so.
	f.Call.Socket.Hold()
	r, err := a.Wait(ctx, req)
	if f.ServiceStopping() {
		f.Call.Stopped = true
	}
	return r, err
}
