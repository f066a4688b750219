package cli

import (
	"context"

	"github.com/prod-write/prod-write/pkg/api"
)

// The calls that add a signed record to a plan: file, decide, gera and
// withdraw, in-process and through the runner service. Each signs with the
// caller's key: in the service, the key the client handed over, so a
// caller with no key of the policy is refused by the key lookup
// (Factory.Actor), which names nothing of the plan but its operation and
// fingerprint. The requests are checked here as well as by the command
// line: the service takes them from any client.

func (a serviceAPI) File(ctx context.Context, req api.FileRequest) (*api.FileResult, error) {
	var r api.FileResult
	if err := a.call(ctx, "file", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a serviceAPI) Decide(ctx context.Context, req api.DecideRequest) (*api.DecideResult, error) {
	var r api.DecideResult
	if err := a.call(ctx, "decide", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a serviceAPI) Gera(ctx context.Context, req api.GeraRequest) (*api.GeraResult, error) {
	var r api.GeraResult
	if err := a.call(ctx, "gera", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a serviceAPI) Withdraw(ctx context.Context, req api.WithdrawRequest) (*api.WithdrawResult, error) {
	var r api.WithdrawResult
	if err := a.call(ctx, "withdraw", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
