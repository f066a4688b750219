package localapi

import (
	"context"
	"errors"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/plans"
	"github.com/prod-write/prod-write/pkg/refusal"
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

// Wait through the service is a run of bounded waits (each at most
// serviceWaitMax, so no call holds a service slot for long), after a
// first status that says whether there is anything to wait for. A
// cancelled ctx closes the connection: the service sees its client go and
// ends that wait at once (docs/adr/0031-waits-through-the-service.md).
func (a ServiceClient) Wait(ctx context.Context, req api.WaitRequest) (*api.WaitResult, error) {
	var deadline time.Time
	if req.Timeout > 0 {
		deadline = time.Now().Add(req.Timeout)
	}
	s, err := a.Status(ctx, api.StatusRequest{Fingerprint: req.Fingerprint})
	if err != nil {
		return nil, err
	}
	for asked := false; ; asked = true {
		if !api.StillPending(s.Refusal, s.Request) {
			return &api.WaitResult{Status: s}, nil
		}
		slice := ServiceWaitMax
		if a.WaitSlice > 0 {
			slice = a.WaitSlice
		}
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return &api.WaitResult{Status: s, Pending: true}, nil
			}
			slice = min(slice, left)
		}
		var r api.WaitResult
		// Said once the service holds the wait: a caller that sees the
		// line and goes (or a stop after it) ends a call the service
		// runs, never one not yet made or still unread.
		held := func() {
			if req.Progress != nil {
				req.Progress(s)
			}
		}
		err := callInto(withHeld(ctx, held), a, api.CallWait, api.WaitRequest{Fingerprint: req.Fingerprint, Timeout: slice}, nil, &r)
		if ctx.Err() != nil {
			// Ended as pending, with the status as it was last judged.
			return &api.WaitResult{Status: s, Pending: true}, nil
		}
		if rf, ok := refusal.As(err); ok && rf.Code == ServiceUnavailable && asked {
			// Asked again after a wait in the service ended: the service
			// stopped (or died) while we waited.
			return nil, refusal.New(ServiceUnavailable, "the runner service went away while waiting for a decision on %s (it stopped or is restarting; wait again once it is back): %s", req.Fingerprint, rf.Reason).
				Needs(rf.Missing...)
		}
		if err != nil {
			return nil, err
		}
		if r.Status == nil {
			return nil, errors.New("the runner service's wait answered no status")
		}
		if s = r.Status; !r.Pending {
			return &r, nil
		}
	}
}
