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
	var result any
	var err error
	switch req.Op {
	case "ops-list":
		result, err = a.Ops(ctx)
	case "ops-show":
		var r api.OpsShowRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.OpsShow(ctx, r)
	case "whoami":
		result, err = a.Whoami(ctx)
	case "plans-complete":
		// Shell completion of a client: the fingerprints of the stored
		// plans with a prefix, as `status` and `receipts list` show them
		// to any caller (docs/adr/0024-completion-through-the-service.md).
		var r api.PlansCompleteRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.PlansComplete(ctx, r)
	case "status":
		var o StatusArgs
		if err := DecodeArgs(req.Op, req.Args, &o); err != nil {
			return answerError(sc, err)
		}
		if o.Wait {
			return answerError(sc, &UsageError{Msg: "status --wait is the call status-wait"})
		}
		if sc.MayReadPlans() {
			result, err = a.Status(ctx, api.StatusRequest{Fingerprint: o.Fingerprint})
		} else {
			// Judged with nothing of the caller's: judging would ask
			// the caller for the plan's files and variables by name.
			result, err = KeylessStatus(f, o.Fingerprint)
		}
	case "status-wait":
		var r api.WaitRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		if !sc.MayReadPlans() {
			// A redacted status says nothing of the gate's judgement:
			// there is nothing a keyless caller could wait on.
			err = refusal.New(refusal.PrincipalUnknown, "status --wait shows what plans bind, and the caller handed over no key of the trust policy").Needs("--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml")
			break
		}
		result, err = ServeWait(f, a, r)
		if f.ClientGone() {
			// Nobody reads the answer, and what the judgement asked the
			// client for may be missing from it: end the call, silently.
			return ExitSignalled
		}
	// The calls that sign with the caller's key: a caller with no key of
	// the policy is refused by the key lookup (Env.Actor).
	case "file":
		var r api.FileRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.File(ctx, r)
	case "decide":
		var r api.DecideRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.Decide(ctx, r)
	case "gera":
		var r api.GeraRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.Gera(ctx, r)
	case "withdraw":
		var r api.WithdrawRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.Withdraw(ctx, r)
	case "freeze-grant":
		var r api.FreezeGrantRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.FreezeGrant(ctx, r)
	case "break-glass":
		var r api.BreakGlassRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.BreakGlass(ctx, r)
	case "break-glass-review":
		var r api.BreakGlassReviewRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.BreakGlassReview(ctx, r)
	case "answer-attested":
		// An answer a bridge signed: stored only when a principal with
		// role bridge signed it and the service's own checks make that
		// very answer (bridge.Source.Admit), whoever the caller is.
		var r api.AnswerAttestedRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.AnswerAttested(ctx, r)
	case "decision-data":
		// The plan's envelope and its evidence: what plans bind, so only
		// for a caller with a key of the policy (a bridge hands over
		// its bridge key).
		var r api.DecisionDataRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		if !sc.MayReadPlans() {
			err = refusal.New(refusal.PrincipalUnknown, "decision data shows what plans bind, and the caller handed over no key of the trust policy").Needs("--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml")
			break
		}
		result, err = a.DecisionData(ctx, r)
	case "plan":
		var pr api.PlanRequest
		if err := DecodeArgs(req.Op, req.Args, &pr); err != nil {
			return answerError(sc, err)
		}
		// The call's files are the descriptors the client handed over
		// (servicecall.Call.File: identity from the object). A caller with no
		// key of the policy plans as plans.Plan lets it: a dry run, with
		// the files it handed over, or nothing; it is asked for no file
		// it did not hand over, nor told a stored plan's path.
		result, err = a.Plan(ctx, pr)
	case "run":
		var r api.RunRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		// Any caller that may connect may ask: the gate decides, and a
		// plan whose approval needs no key (a standing go) runs for a
		// caller with none. What such a caller is told is the run
		// order's: a file it did not hand over is asked of it only with
		// a key (servicecall.Call.File), and a refusal names the operation and
		// fingerprint. The program's stdin is the descriptor handed over,
		// its output goes through the call's relay (Serve), never onto
		// a descriptor of the caller's.
		result, err = a.Run(ctx, api.RunRequest{Fingerprint: r.Fingerprint, Stdin: f.IO.In, Stdout: f.IO.Out, Stderr: f.IO.Err})
		if sc.FinishOutput != nil {
			// The relay's sender is done before the reply is sent, on
			// the same socket (a refusal ends the relay here; a run
			// did, before its outcome receipt).
			sc.FinishOutput()
		}
	case "receipts-list":
		var r api.ReceiptsListRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		// Names and fingerprints for any caller; a break-glass run's
		// reason and incident only with a key (localAPI.ReceiptsList).
		result, err = a.ReceiptsList(ctx, r)
	case "receipts-checkpoint":
		// Signed here, with the service's runner key; the client writes
		// it where its caller asked.
		var r api.ReceiptsCheckpointRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.ReceiptsCheckpoint(ctx, r)
	case "receipts-export":
		var r api.ReceiptsExportRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		// Signed here, with the service's runner key, and sent over the
		// call's own socket as they are; a caller with no key of the
		// policy is refused (localAPI.ReceiptsExport).
		r.Out = f.IO.Out
		result, err = a.ReceiptsExport(ctx, r)
	case "replay":
		var r api.ReplayRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		// The service's own journal, policy, registry and history:
		// nothing the caller names. The verdicts name operations and
		// runners, and say why an entry fails, as receipts list does.
		result, err = ServeReplay(ctx, a, r, f.IO.Out)
	case "receipts-prove":
		// Hashes and a signed tree head: nothing a plan binds.
		var r api.ReceiptsProveRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.ReceiptsProve(ctx, r)
	case "receipts-consistency":
		// Hashes of trees the caller's own notes sign: nothing a plan
		// binds.
		var r api.ReceiptsConsistencyRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.ReceiptsConsistency(ctx, r)
	case "receipts-show":
		var r api.ReceiptsShowRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		// A caller with no key of the policy reads each entry redacted:
		// what names and hashes the run, nothing the plan binds.
		result, err = ServeReceiptsShow(ctx, a, r, sc.MayReadPlans())
	// Passkey enrolment: a code only for the service's operator
	// (localAPI.PasskeyCode); a begin by the caller's key or a code; a
	// finish judged against a challenge this service issued, once.
	case "passkey-code":
		var r api.PasskeyCodeRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.PasskeyCode(ctx, r)
	case "passkey-enroll-begin":
		var r api.PasskeyEnrollBeginRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.PasskeyEnrollBegin(ctx, r)
	case "passkey-enroll-finish":
		var r api.PasskeyEnrollFinishRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.PasskeyEnrollFinish(ctx, r)
	// The approval page's: a statement only for a caller whose key holds
	// role bridge (localAPI.PasskeyChallenge); a decision stored only when
	// a bridge signed it, its nonce is this service's for exactly its
	// statement and unspent, and the gate verifies it, whoever the caller.
	case "passkey-challenge":
		var r api.PasskeyChallengeRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.PasskeyChallenge(ctx, r)
	case "passkey-attested":
		var r api.PasskeyAttestedRequest
		if err := DecodeArgs(req.Op, req.Args, &r); err != nil {
			return answerError(sc, err)
		}
		result, err = a.PasskeyAttested(ctx, r)
	default:
		return answerError(sc, &UsageError{Msg: "the service has no typed form of " + req.Op})
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

// Client is the API of the runner service f's configuration names.
type Client struct {
	Env *Env
	// WaitSlice bounds each of the service's waits a Wait asks for (0:
	// serviceWaitMax): the MCP server reports progress after each.
	WaitSlice time.Duration
}

func (a Client) call(ctx context.Context, op string, args, result any) error {
	return a.callWith(ctx, op, args, nil, result)
}

// callWith is call handing over the caller's files too.
func (a Client) callWith(ctx context.Context, op string, args any, files []handover, result any) error {
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

func (a Client) Ops(ctx context.Context) (*api.OpsResult, error) {
	var r api.OpsResult
	if err := a.call(ctx, "ops-list", nil, &r); err != nil {
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

func (a Client) OpsShow(ctx context.Context, req api.OpsShowRequest) (*api.OpsShowResult, error) {
	var r api.OpsShowResult
	if err := a.call(ctx, "ops-show", &req, &r); err != nil {
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

func (a Client) PlansComplete(ctx context.Context, req api.PlansCompleteRequest) (*api.PlansCompleteResult, error) {
	var r api.PlansCompleteResult
	if err := a.call(ctx, "plans-complete", &req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a Client) Whoami(ctx context.Context) (*api.WhoamiResult, error) {
	var r api.WhoamiResult
	if err := a.call(ctx, "whoami", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a Client) Status(ctx context.Context, req api.StatusRequest) (*api.StatusResult, error) {
	var r api.StatusResult
	if err := a.call(ctx, "status", &StatusArgs{Fingerprint: req.Fingerprint}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// The two implementations of the application API (pkg/api): in-process,
// with f's own configuration, policy, store and registry (local mode, and
// the service itself); and the runner service's socket client. Both
// return the same types, and the commands render them on the caller's
// side (docs/adr/0038-one-typed-api.md).
var (
	_ api.API = API{}
	_ api.API = Client{}
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
	return Client{Env: f}, nil
}
