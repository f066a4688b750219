package cli

import (
	"context"

	"github.com/prod-write/prod-write/pkg/api"
)

// BreakGlass and BreakGlassReview, in-process and through the runner
// service: signed with the caller's key (role break-glass, role approver),
// so a caller with no key of the policy is refused by the key lookup.

func (a serviceAPI) BreakGlass(ctx context.Context, req api.BreakGlassRequest) (*api.BreakGlassResult, error) {
	var r api.BreakGlassResult
	if err := a.call(ctx, "break-glass", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a serviceAPI) BreakGlassReview(ctx context.Context, req api.BreakGlassReviewRequest) (*api.BreakGlassReviewResult, error) {
	var r api.BreakGlassReviewResult
	if err := a.call(ctx, "break-glass-review", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
