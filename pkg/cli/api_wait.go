package cli

import (
	"context"
	"errors"
	"time"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// Wait through the service is a run of bounded waits (each at most
// serviceWaitMax, so no call holds a service slot for long), after a
// first status that says whether there is anything to wait for. A
// cancelled ctx closes the connection: the service sees its client go and
// ends that wait at once (docs/adr/0031-waits-through-the-service.md).
func (a serviceAPI) Wait(ctx context.Context, req api.WaitRequest) (*api.WaitResult, error) {
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
		slice := localapi.ServiceWaitMax
		if a.waitSlice > 0 {
			slice = a.waitSlice
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
		err := a.call(withHeld(ctx, held), "status-wait", api.WaitRequest{Fingerprint: req.Fingerprint, Timeout: slice}, &r)
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
