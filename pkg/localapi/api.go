package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/plans"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// API is the API in this process.
type API struct {
	Env *Env
	// Progress, when set, hears the hashing of large files.
	Progress func(name string, done, total int64)
	// Redact is set by the service's dispatch, from Authorize: the caller
	// gets the call's result without what plans bind.
	Redact bool
}

func (a API) Ops(context.Context) (*api.OpsResult, error) {
	reg, err := LoadRegistry(a.Env)
	if err != nil {
		return nil, err
	}
	r := &api.OpsResult{Operations: NonNil(reg.All())}
	// The policy it judges by, when it loads (a registry is listed
	// whatever the policy's state; doctor and replay say what is wrong
	// with it).
	if c, err := a.Env.Config(); err == nil {
		if p, err := a.Env.Policy(c); err == nil {
			r.PolicyDigest = p.Digest
		}
	}
	return r, nil
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
	if a.Redact {
		// Judged with nothing of the caller's: judging would ask the
		// caller for the plan's files and variables by name.
		return KeylessStatus(a.Env, req.Fingerprint)
	}
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

// ServeAPI answers a typed call in the service (Request.API): the
// in-process API with the call's Env, its outcome (result, refusal or
// error) as an api.Answer, a status redacted for a caller that may not
// read plans; a call that could not be made at all is answered with its
// typed error (answerError). It returns the exit status for the log.
func (h *ServiceHandler) ServeAPI(f *Env, sc *servicecall.Call) int {
	req := sc.Socket.Request
	if req.API != api.Version {
		return answerError(sc, &UsageError{Msg: "this service speaks version 1 of the typed API"})
	}
	// What the call tells its caller besides its result goes back in the
	// answer, as data (docs/adr/0050-notices-are-data.md); the registry
	// loads on a goroutine of its own, hence the lock.
	var (
		mu      sync.Mutex
		notices []api.Notice
	)
	f.Notices = func(n api.Notice) {
		mu.Lock()
		notices = append(notices, n)
		mu.Unlock()
	}
	answer := func(ans api.Answer, code int) int {
		mu.Lock()
		ans.Notices = notices
		mu.Unlock()
		return reply(sc, ans, code)
	}
	a := API{Env: f}
	if req.ErrTTY && !req.JSON {
		// Sent as text to the client's stderr, as it happens.
		a.Progress = ProgressPrinter(f.IO.Err)
	}
	ctx := context.Background()
	c, ok := api.CallOf(req.Op)
	serve := handlers[req.Op]
	if !ok || serve == nil {
		return answerError(sc, &UsageError{Msg: "the service has no typed form of " + req.Op})
	}
	// Who may make the call, and what it sees of the result, is decided
	// here, from the table of calls, before the handler runs.
	result, err := any(nil), error(nil)
	if a.Redact, err = f.authorize(c); err == nil {
		result, err = serve(ctx, a, sc, req.Args)
	}
	if errors.Is(err, errNoReply) {
		return ExitSignalled
	}
	if err != nil {
		var usage *argsError
		if errors.As(err, &usage) {
			return answerError(sc, usage.err)
		}
	}
	var ans api.Answer
	code := ExitOK
	if err != nil {
		code = ExitCode(err)
		if r, ok := refusal.As(err); ok {
			ans.Refusal = r
		} else {
			ans.Error = APIError(err)
		}
	} else if ans.Result, err = json.Marshal(result); err != nil {
		return answer(api.Answer{Error: APIError(err)}, ExitCode(err))
	} else if w, ok := result.(*api.WaitResult); ok && w.Pending {
		// For the log: a wait that ended pending, as --timeout's end.
		code = ExitTimeout
	} else if r, ok := result.(*api.RunResult); ok {
		// For the log: the program's.
		code = r.ExitCode
	}
	return answer(ans, code)
}

// answerError answers a call that could not be made at all (a version the
// service does not speak, an op it has no typed form of, arguments that
// do not decode) as the typed error it is: the client says why, on its
// side; the service writes no text.
func answerError(sc *servicecall.Call, err error) int {
	return reply(sc, api.Answer{Error: APIError(err)}, ExitCode(err))
}

// reply sends ans on the call's own socket and returns code, the exit
// status the service's log records.
func reply(sc *servicecall.Call, ans api.Answer, code int) int {
	b, err := json.Marshal(ans)
	if err != nil {
		b, code = []byte(`{"error":{"code":"internal","exit":70,"message":"the service could not encode its answer"}}`), ExitSoftware
	}
	if err := sc.Socket.Reply(b); err != nil {
		// The client stopped reading or went: nobody to tell.
		return ExitIOErr
	}
	return code
}

// KeylessStatus is the redacted status of the plan stored under fp, read
// without asking the caller anything.
func KeylessStatus(f *Env, fp string) (*api.StatusResult, error) {
	plan, err := f.StoredPlan(fp)
	if err != nil {
		return nil, err
	}
	return api.RedactedStatus(plan.Fingerprint, plan.Operation, plan.Target, plan.Mutating, FormatVersion), nil
}

// APIError is err as the service reports it to a typed call.
func APIError(err error) *api.Error {
	e := &api.Error{Code: ErrorCode(err), Exit: ExitCode(err), Message: err.Error()}
	var usage *UsageError
	switch {
	case errors.As(err, &usage):
		e.Hint = "see 'prod-write --help'"
	case errors.Is(err, keys.ErrNotAKey):
		e.Hint = "a key is the file `prod-write keygen --out FILE` writes (PKCS#8 PEM, mode 0600); its public line goes in trust.toml"
	}
	return e
}

// DecodeArgs decodes a call's arguments strictly.
func DecodeArgs(op string, b []byte, v any) error {
	if len(b) == 0 {
		return &UsageError{Msg: "the request carries no arguments"}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &UsageError{Msg: fmt.Sprintf("arguments of %s: %v", op, err)}
	}
	return nil
}

// ServiceClient is the API of the runner service f's configuration names.
type ServiceClient struct {
	Env *Env
	// WaitSlice bounds each of the service's waits a Wait asks for (0:
	// serviceWaitMax): the MCP server reports progress after each.
	WaitSlice time.Duration
}

// call makes call c of the runner service with req, handing over files,
// and returns its result.
func call[Req, Res any](ctx context.Context, a ServiceClient, c api.Call[Req, Res], req Req, files []handover) (*Res, error) {
	var r Res
	if err := callInto(ctx, a, c, req, files, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// callInto is call decoding the result into r.
func callInto[Req, Res any](ctx context.Context, a ServiceClient, c api.Call[Req, Res], req Req, files []handover, r *Res) error {
	var args any = req
	if _, none := args.(api.None); none {
		args = nil
	}
	return a.callWith(ctx, c.Op, args, files, r)
}

// callWith is call handing over the caller's files too.
func (a ServiceClient) callWith(ctx context.Context, op string, args any, files []handover, result any) error {
	c, err := a.Env.LoadConfig()
	if err != nil {
		return err
	}
	b, err := a.Env.CallService(ctx, c, op, args, files)
	if err != nil {
		return err
	}
	notices, err := api.Decode(b, result)
	for _, n := range notices {
		a.Env.Notify(n)
	}
	return err
}

func (a ServiceClient) Ops(ctx context.Context) (*api.OpsResult, error) {
	var r api.OpsResult
	if err := callInto(ctx, a, api.CallOps, api.None{}, nil, &r); err != nil {
		return nil, err
	}
	reg, err := RegistryOf(r.Operations)
	if err != nil {
		return nil, err
	}
	return &api.OpsResult{Operations: NonNil(reg.All()), PolicyDigest: r.PolicyDigest}, nil
}

// RegistryOf is the registry of definitions the service sent, each checked
// against its digest, as hashed.
func RegistryOf(ops []*operations.Operation) (*operations.Registry, error) {
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return operations.Decode(b)
}

func (a ServiceClient) OpsShow(ctx context.Context, req api.OpsShowRequest) (*api.OpsShowResult, error) {
	var r api.OpsShowResult
	if err := callInto(ctx, a, api.CallOpsShow, req, nil, &r); err != nil {
		return nil, err
	}
	// Checked against its digest, as the registry's are.
	reg, err := RegistryOf([]*operations.Operation{r.Operation})
	if err != nil {
		return nil, err
	}
	op, ok := reg.Get(req.Name)
	if !ok {
		return nil, fmt.Errorf("the runner service answered ops show %q with another operation", req.Name)
	}
	return &api.OpsShowResult{Operation: op}, nil
}

func (a ServiceClient) PlansComplete(ctx context.Context, req api.PlansCompleteRequest) (*api.PlansCompleteResult, error) {
	return call(ctx, a, api.CallPlansComplete, req, nil)
}

func (a ServiceClient) Whoami(ctx context.Context) (*api.WhoamiResult, error) {
	return call(ctx, a, api.CallWhoami, api.None{}, nil)
}

func (a ServiceClient) Status(ctx context.Context, req api.StatusRequest) (*api.StatusResult, error) {
	return call(ctx, a, api.CallStatus, api.StatusArgs{Fingerprint: req.Fingerprint}, nil)
}

// The two implementations of the application API (pkg/api): in-process,
// with f's own configuration, policy, store and registry (local mode, and
// the service itself); and the runner service's socket client. Both
// return the same types, and the commands render them on the caller's
// side (docs/adr/0038-one-typed-api.md).
var (
	_ api.API = API{}
	_ api.API = ServiceClient{}
)

// Reach returns the API this caller reaches: the service's when its
// configuration names one (and this is not the service), else in-process.
func (f *Env) Reach() (api.API, error) {
	if f.Call != nil {
		return API{Env: f}, nil
	}
	c, err := f.LoadConfig()
	if err != nil {
		return nil, err
	}
	if c.Service.Socket == "" {
		return API{Env: f}, nil
	}
	return ServiceClient{Env: f}, nil
}
