package localapi

import (
	"context"
	"strings"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
)

// FreezeGrant, in-process and through the runner service: signed with the
// caller's key (role freeze), so a caller with no key of the policy is
// refused by the key lookup.

func (a API) FreezeGrant(_ context.Context, req api.FreezeGrantRequest) (*api.FreezeGrantResult, error) {
	// Checked here, not only by the command line: the service takes the
	// request from any client.
	if strings.TrimSpace(req.Freeze) == "" || strings.TrimSpace(req.Reason) == "" {
		return nil, &UsageError{Msg: "--freeze and --reason are required"}
	}
	f := a.Env
	pc, err := loadPlan(f, req.Fingerprint)
	if err != nil {
		return nil, err
	}
	if err := pc.HasFreeze(req.Freeze); err != nil {
		return nil, err
	}
	k, pr, err := pc.actor(f, approval.RoleFreeze, false)
	if err != nil {
		return nil, err
	}
	now := f.Now().UTC()
	id, g, err := pc.GrantFreeze(k, pr, req.Freeze, req.Reason, now, req.TTL)
	if err != nil {
		return nil, err
	}
	return &api.FreezeGrantResult{Written: api.Written{FormatVersion: FormatVersion, Kind: approval.KindFreezeGrant, ID: id, Actor: pr.ID, Fingerprint: pc.Plan.Fingerprint, Verdict: "grant", Freeze: g.Freeze, Issued: now, Expires: g.Expires}}, nil
}

func (a ServiceClient) FreezeGrant(ctx context.Context, req api.FreezeGrantRequest) (*api.FreezeGrantResult, error) {
	return call(ctx, a, api.CallFreezeGrant, req, nil)
}
