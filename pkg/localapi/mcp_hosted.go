package localapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// HostedMCPBackend is the backend of MCP over HTTP acting for principal:
// the API's calls with an Env the service builds (no client: no files,
// no working directory but an operation's declared cwd, no environment),
// signing with the principal's key from the service's mcp_keys directory
// when it has one there.
func HostedMCPBackend(s *servicecall.State, base *Env, principal string) (mcpapi.Backend, error) {
	pr, ok := s.Current().Policy.ByID(principal)
	if !ok {
		return nil, fmt.Errorf("token principal %q is not in the trust policy", principal)
	}
	sc := &servicecall.Call{State: s, Files: map[string]*os.File{}, Hosted: true}
	if dir := s.Cfg.Service.MCPKeys; dir != "" {
		kf, err := os.Open(filepath.Join(dir, principal+".key"))
		switch {
		case err == nil:
			k, err := keys.LoadFile(kf, kf.Name())
			if err != nil {
				kf.Close()
				return nil, err
			}
			if kp, ok := s.Current().Policy.ByKey(k.Public().ID()); !ok || kp.ID != principal {
				kf.Close()
				return nil, fmt.Errorf("%s is not %s's key", kf.Name(), principal)
			}
			sc.Key = kf
		case !errors.Is(err, os.ErrNotExist):
			return nil, err
		}
	}
	f := &Env{
		IO: &Streams{Out: io.Discard, Err: io.Discard}, Now: base.Now, JSON: true, AWS: base.AWS, Net: base.Net, Call: sc,
		Getwd:     sc.Getwd,
		LookupEnv: func(string) (string, bool) { return "", false },
		// A hosted call's warnings go to the service's log.
		Notices: func(n api.Notice) { s.Log.Printf("MCP over HTTP for %s: %s", principal, n.Text) },
	}
	return &hostedBackend{MCPBackend: NewMCPBackend(f), pr: pr, sc: sc}, nil
}

// hostedBackend acts for a token's principal, with or without its key.
type hostedBackend struct {
	*MCPBackend
	pr *approval.Principal
	// sc is shared by the principal's calls; one that supplies files
	// inline has a copy of its own (forCall).
	sc *servicecall.Call
}

func (h *hostedBackend) Principal() (*approval.Principal, error) { return h.pr, nil }

// Plan plans with each file's content supplied inline: a hosted caller
// shares no file system with the service, and names no path on its disk
// (docs/adr/0039-inline-files-over-mcp-http.md).
func (h *hostedBackend) Plan(req mcpapi.PlanRequest) (*api.PlanResult, error) {
	if len(req.Files) > 0 {
		return nil, refusal.New(refusal.ParamInvalid, "MCP over HTTP takes a file's content inline, never a path on the runner service's disk").For(req.Operation, "").Needs("each file as {\"content\": …}")
	}
	reg, err := h.Registry()
	if err != nil {
		return nil, err
	}
	op, ok := reg.Get(req.Operation)
	if !ok {
		return nil, refusal.New(refusal.OperationAbsent, "no operation named %q is in the registry", req.Operation).For(req.Operation, "")
	}
	b, done, err := h.forCall(op.Name, slices.Collect(maps.Keys(op.Files)), req.Inline)
	if err != nil {
		return nil, err
	}
	defer done()
	files := map[string]string{}
	for name := range req.Inline {
		files[name] = operations.InlinePath(name)
	}
	a, err := b.reach(api.CallPlan.CallInfo, 0)
	if err != nil {
		return nil, err
	}
	return a.Plan(context.Background(), api.PlanRequest{Operation: req.Operation, Target: req.Target, Params: req.Params, Files: files})
}

// Run runs the plan: with the content of its files supplied inline that
// the call sends again, and the content kept with the plan for the rest
// (docs/adr/0063-file-content-kept-with-the-plan.md).
func (h *hostedBackend) Run(fp string, inline map[string][]byte) (*mcpapi.RunResult, error) {
	if len(inline) == 0 {
		return h.MCPBackend.Run(fp, nil)
	}
	var declared []string
	plan, err := h.storedPlan(fp)
	if err != nil {
		return nil, err
	}
	for _, fl := range plan.Files {
		if _, ok := operations.InlineName(fl.Path); ok {
			declared = append(declared, fl.Name)
		}
	}
	b, done, err := h.forCall(plan.Operation, declared, inline)
	if err != nil {
		return nil, err
	}
	defer done()
	return b.Run(fp, nil)
}

// storedPlan is the plan stored under fp, verified.
func (h *hostedBackend) storedPlan(fp string) (*operations.Plan, error) {
	return h.MCPBackend.f.StoredPlan(fp)
}

// forCall returns a backend for one call whose files, supplied inline,
// are each a sealed memfd of this call alone, and done, which frees them.
// What a hosted caller supplies is attacker input to a privileged
// process: a name that is not one of names (the operation's files, or
// the plan's inline ones) is refused, and so is content over
// mcpapi.MaxInlineFile or, in all, mcpapi.MaxInlineTotal, before any of
// it is copied; nothing of it is written to disk, and no error quotes it.
func (h *hostedBackend) forCall(operation string, names []string, inline map[string][]byte) (*MCPBackend, func(), error) {
	total := 0
	for _, name := range slices.Sorted(maps.Keys(inline)) {
		if !slices.Contains(names, name) {
			return nil, nil, refusal.New(refusal.ParamInvalid, "operation %s declares no file %q supplied inline", operation, name).For(operation, "")
		}
		n := len(inline[name])
		total += n
		if n > mcpapi.MaxInlineFile {
			return nil, nil, refusal.New(refusal.ParamInvalid, "file %s: %d bytes supplied inline, over MCP HTTP's bound of %d", name, n, mcpapi.MaxInlineFile).For(operation, "")
		}
		if total > mcpapi.MaxInlineTotal {
			return nil, nil, refusal.New(refusal.ParamInvalid, "files supplied inline: over MCP HTTP's bound of %d bytes in all", mcpapi.MaxInlineTotal).For(operation, "")
		}
	}
	sc := *h.sc
	sc.Inline = map[string]*os.File{}
	done := func() {
		for _, fl := range sc.Inline {
			fl.Close()
		}
	}
	for name, content := range inline {
		fl, err := execute.SealedBytes(name, content)
		if err != nil {
			done()
			return nil, nil, err
		}
		sc.Inline[name] = fl
	}
	g := *h.MCPBackend.f
	g.Call, g.Getwd = &sc, sc.Getwd
	return &MCPBackend{f: &g}, done, nil
}
