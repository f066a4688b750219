package cli

import (
	"context"

	"github.com/prod-write/prod-write/pkg/api"
)

// FreezeGrant, in-process and through the runner service: signed with the
// caller's key (role freeze), so a caller with no key of the policy is
// refused by the key lookup.

func (a serviceAPI) FreezeGrant(ctx context.Context, req api.FreezeGrantRequest) (*api.FreezeGrantResult, error) {
	var r api.FreezeGrantResult
	if err := a.call(ctx, "freeze-grant", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
