package localapi

import (
	"context"
	"strings"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// BreakGlass and BreakGlassReview, in-process and through the runner
// service: signed with the caller's key (role break-glass, role approver),
// so a caller with no key of the policy is refused by the key lookup.

func (a API) BreakGlass(_ context.Context, req api.BreakGlassRequest) (*api.BreakGlassResult, error) {
	// Checked here, not only by the command line: the service takes the
	// request from any client.
	if strings.TrimSpace(req.Reason) == "" || strings.TrimSpace(req.Incident) == "" {
		return nil, &UsageError{Msg: "--reason and --incident are required"}
	}
	f := a.Env
	f.PostsDecisions = true // notifying needs prod-write-net
	pc, err := loadPlan(f, req.Fingerprint)
	if err != nil {
		return nil, err
	}
	if err := pc.AllowsBreakGlass(); err != nil {
		return nil, err
	}
	// The planner may break glass on its own plan (ADR 0028), so not
	// pc.actor, which refuses it.
	k, pr, err := f.Actor(pc.Policy, approval.RoleBreakGlass)
	if err != nil {
		if r, ok := refusal.As(err); ok {
			r.For(pc.Plan.Operation, pc.Plan.Fingerprint)
		}
		return nil, err
	}
	now := f.Now().UTC()
	id, b, err := pc.BreakGlass(k, pr, req.Reason, req.Incident, now, req.TTL)
	if err != nil {
		return nil, err
	}
	notifyBreakGlass(f, pc, id, b)
	return &api.BreakGlassResult{Written: api.Written{FormatVersion: FormatVersion, Kind: approval.KindBreakGlass, ID: id, Actor: pr.ID, Fingerprint: pc.Plan.Fingerprint, Verdict: "break-glass", Incident: b.Incident, Issued: now, Expires: b.Expires}}, nil
}

func (a API) BreakGlassReview(_ context.Context, req api.BreakGlassReviewRequest) (*api.BreakGlassReviewResult, error) {
	return breakGlassReview(a.Env, req)
}

func (a ServiceClient) BreakGlass(ctx context.Context, req api.BreakGlassRequest) (*api.BreakGlassResult, error) {
	return call(ctx, a, api.CallBreakGlass, req, nil)
}

func (a ServiceClient) BreakGlassReview(ctx context.Context, req api.BreakGlassReviewRequest) (*api.BreakGlassReviewResult, error) {
	return call(ctx, a, api.CallReview, req, nil)
}
