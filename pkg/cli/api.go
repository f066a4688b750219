package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// The two implementations of the application API (pkg/api): in-process,
// with f's own configuration, policy, store and registry (local mode, and
// the service itself); and the runner service's socket client. Both
// return the same types, and the commands render them on the caller's
// side (docs/adr/0038-one-typed-api.md).
var (
	_ api.API = localapi.API{}
	_ api.API = serviceAPI{}
)

// api returns the API this caller reaches: the service's when its
// configuration names one (and this is not the service), else in-process.
func (f *Factory) api() (api.API, error) {
	if f.Call != nil {
		return localapi.API{Env: &f.Env}, nil
	}
	c, err := f.LoadConfig()
	if err != nil {
		return nil, err
	}
	if c.Service.Socket == "" {
		return localapi.API{Env: &f.Env}, nil
	}
	return serviceAPI{f: f}, nil
}

// serviceAPI is the API of the runner service f's configuration names.
type serviceAPI struct {
	f *Factory
	// waitSlice bounds each of the service's waits a Wait asks for (0:
	// serviceWaitMax): the MCP server reports progress after each.
	waitSlice time.Duration
}

func (a serviceAPI) call(ctx context.Context, op string, args, result any) error {
	return a.callWith(ctx, op, args, nil, result)
}

// callWith is call handing over the caller's files too.
func (a serviceAPI) callWith(ctx context.Context, op string, args any, files []handover, result any) error {
	c, err := a.f.LoadConfig()
	if err != nil {
		return err
	}
	b, err := a.f.callServiceAPI(ctx, c, op, args, files)
	if err != nil {
		return err
	}
	return api.Decode(b, result)
}

func (a serviceAPI) Ops(ctx context.Context) (*api.OpsResult, error) {
	var r api.OpsResult
	if err := a.call(ctx, "ops-list", nil, &r); err != nil {
		return nil, err
	}
	reg, err := registryOf(r.Operations)
	if err != nil {
		return nil, err
	}
	return &api.OpsResult{Operations: localapi.NonNil(reg.All())}, nil
}

// registryOf is the registry of definitions the service sent, each checked
// against its digest, as hashed.
func registryOf(ops []*operations.Operation) (*operations.Registry, error) {
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return operations.Decode(b)
}

func (a serviceAPI) OpsShow(ctx context.Context, req api.OpsShowRequest) (*api.OpsShowResult, error) {
	var r api.OpsShowResult
	if err := a.call(ctx, "ops-show", &req, &r); err != nil {
		return nil, err
	}
	// Checked against its digest, as the registry's are.
	reg, err := registryOf([]*operations.Operation{r.Operation})
	if err != nil {
		return nil, err
	}
	op, ok := reg.Get(req.Name)
	if !ok {
		return nil, fmt.Errorf("the runner service answered ops show %q with another operation", req.Name)
	}
	return &api.OpsShowResult{Operation: op}, nil
}

func (a serviceAPI) PlansComplete(ctx context.Context, req api.PlansCompleteRequest) (*api.PlansCompleteResult, error) {
	var r api.PlansCompleteResult
	if err := a.call(ctx, "plans-complete", &req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a serviceAPI) Whoami(ctx context.Context) (*api.WhoamiResult, error) {
	var r api.WhoamiResult
	if err := a.call(ctx, "whoami", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a serviceAPI) Status(ctx context.Context, req api.StatusRequest) (*api.StatusResult, error) {
	var r api.StatusResult
	if err := a.call(ctx, "status", &StatusOptions{Fingerprint: req.Fingerprint}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
