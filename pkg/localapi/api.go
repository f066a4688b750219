package localapi

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/plans"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// API is the API in this process.
type API struct {
	Env *Env
	// Progress, when set, hears the hashing of large files.
	Progress func(name string, done, total int64)
}

func (a API) Ops(context.Context) (*api.OpsResult, error) {
	reg, err := LoadRegistry(a.Env)
	if err != nil {
		return nil, err
	}
	return &api.OpsResult{Operations: NonNil(reg.All())}, nil
}

func (a API) OpsShow(_ context.Context, req api.OpsShowRequest) (*api.OpsShowResult, error) {
	reg, err := LoadRegistry(a.Env)
	if err != nil {
		return nil, err
	}
	op, ok := reg.Get(req.Name)
	if !ok {
		return nil, refusal.New(refusal.OperationAbsent, "no operation named %q is in the registry", req.Name).For(req.Name, "")
	}
	return &api.OpsShowResult{Operation: op}, nil
}

func (a API) Whoami(context.Context) (*api.WhoamiResult, error) {
	c, err := a.Env.Config()
	if err != nil {
		return nil, err
	}
	p, err := a.Env.Policy(c)
	if err != nil {
		return nil, err
	}
	_, pr, err := a.Env.Actor(p, "")
	if err != nil {
		return nil, err
	}
	return &api.WhoamiResult{Principal: pr}, nil
}

func (a API) Status(_ context.Context, req api.StatusRequest) (*api.StatusResult, error) {
	s, err := plans.Status(a.Env.Plans(), req.Fingerprint, operations.HashDigester{Progress: a.Progress})
	if err != nil {
		return nil, err
	}
	r := s.Result(FormatVersion)
	r.ApprovalPage = a.Env.ApprovalPage(r.Fingerprint)
	return r, nil
}

// ApprovalPage is the address of the decision on fp on the deployment's
// approval page, or "" when it serves none.
func (f *Env) ApprovalPage(fp string) string {
	c, err := f.LoadConfig()
	if err != nil || !PageEnabled(c.Bridge) {
		return ""
	}
	p, err := f.Policy(c)
	if o := PageOrigin(c, p); err == nil && o != "" {
		return approvalpage.URL(o, fp)
	}
	return ""
}

// PlansComplete reads nothing but the store's plan names. Never handed
// over to prod-write-net: only the embedded store lists plans by prefix; a
// store that looks up whole fingerprints only completes nothing.
func (a API) PlansComplete(_ context.Context, req api.PlansCompleteRequest) (*api.PlansCompleteResult, error) {
	h := strings.TrimPrefix(req.Prefix, "sha256:")
	if len(h) > 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return nil, &UsageError{Msg: fmt.Sprintf("%q is not a fingerprint prefix: want lowercase hex digits", req.Prefix)}
	}
	c, err := a.Env.LoadConfig()
	if err != nil {
		return nil, err
	}
	st, err := a.Env.Store(c)
	if err != nil {
		return nil, err
	}
	r := &api.PlansCompleteResult{Fingerprints: []string{}}
	lister, ok := st.(interface {
		PlansWithPrefix(string) ([]string, error)
	})
	if !ok {
		return r, nil
	}
	fps, err := lister.PlansWithPrefix(h)
	if err != nil {
		return nil, err
	}
	sort.Strings(fps)
	r.Fingerprints = append(r.Fingerprints, fps...)
	return r, nil
}
