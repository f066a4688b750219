package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/servicecall"
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

// serveAPI answers a typed call in the service (Request.API): the
// in-process API with the call's Factory, its outcome (result, refusal or
// error) as an api.Answer, a status redacted for a caller that may not
// read plans. It returns the exit status, and an error only for a call it
// could not answer at all (which the caller prints).
func (h *serviceHandler) serveAPI(f *Factory, sc *servicecall.Call) (int, error) {
	req := sc.Socket.Request
	if req.API != api.Version {
		return ExitUsage, &localapi.UsageError{Msg: "this service speaks version 1 of the typed API"}
	}
	a := localapi.API{Env: &f.Env}
	if req.ErrTTY && !req.JSON {
		// Sent as text to the client's stderr, as it happens.
		a.Progress = localapi.ProgressPrinter(f.IO.Err)
	}
	ctx := context.Background()
	var result any
	var err error
	switch req.Op {
	case "ops-list":
		result, err = a.Ops(ctx)
	case "ops-show":
		var r api.OpsShowRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.OpsShow(ctx, r)
	case "whoami":
		result, err = a.Whoami(ctx)
	case "plans-complete":
		// Shell completion of a client: the fingerprints of the stored
		// plans with a prefix, as `status` and `receipts list` show them
		// to any caller (docs/adr/0024-completion-through-the-service.md).
		var r api.PlansCompleteRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.PlansComplete(ctx, r)
	case "status":
		var o StatusOptions
		if err := decodeArgs(req.Op, req.Args, &o); err != nil {
			return ExitUsage, err
		}
		if o.Wait {
			return ExitUsage, &localapi.UsageError{Msg: "status --wait is the call status-wait"}
		}
		if sc.MayReadPlans() {
			result, err = a.Status(ctx, api.StatusRequest{Fingerprint: o.Fingerprint})
		} else {
			// Judged with nothing of the caller's: judging would ask
			// the caller for the plan's files and variables by name.
			result, err = keylessStatus(f, o.Fingerprint)
		}
	case "status-wait":
		var r api.WaitRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		if !sc.MayReadPlans() {
			// A redacted status says nothing of the gate's judgement:
			// there is nothing a keyless caller could wait on.
			err = refusal.New(refusal.PrincipalUnknown, "status --wait shows what plans bind, and the caller handed over no key of the trust policy").Needs("--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml")
			break
		}
		result, err = serveWait(f, a, r)
		if f.clientGone() {
			// Nobody reads the answer, and what the judgement asked the
			// client for may be missing from it: end the call, silently.
			return ExitSignalled, nil
		}
	// The calls that sign with the caller's key: a caller with no key of
	// the policy is refused by the key lookup (Factory.Actor).
	case "file":
		var r api.FileRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.File(ctx, r)
	case "decide":
		var r api.DecideRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.Decide(ctx, r)
	case "gera":
		var r api.GeraRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.Gera(ctx, r)
	case "withdraw":
		var r api.WithdrawRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.Withdraw(ctx, r)
	case "freeze-grant":
		var r api.FreezeGrantRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.FreezeGrant(ctx, r)
	case "break-glass":
		var r api.BreakGlassRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.BreakGlass(ctx, r)
	case "break-glass-review":
		var r api.BreakGlassReviewRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.BreakGlassReview(ctx, r)
	case "answer-attested":
		// An answer a bridge signed: stored only when a principal with
		// role bridge signed it and the service's own checks make that
		// very answer (bridge.Source.Admit), whoever the caller is.
		var r api.AnswerAttestedRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.AnswerAttested(ctx, r)
	case "decision-data":
		// The plan's envelope and its evidence: what plans bind, so only
		// for a caller with a key of the policy (a bridge hands over
		// its bridge key).
		var r api.DecisionDataRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		if !sc.MayReadPlans() {
			err = refusal.New(refusal.PrincipalUnknown, "decision data shows what plans bind, and the caller handed over no key of the trust policy").Needs("--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml")
			break
		}
		result, err = a.DecisionData(ctx, r)
	case "plan":
		var pr api.PlanRequest
		if err := decodeArgs(req.Op, req.Args, &pr); err != nil {
			return ExitUsage, err
		}
		// The call's files are the descriptors the client handed over
		// (servicecall.Call.File: identity from the object). A caller with no
		// key of the policy plans as plans.Plan lets it: a dry run, with
		// the files it handed over, or nothing; it is asked for no file
		// it did not hand over, nor told a stored plan's path.
		result, err = a.Plan(ctx, pr)
	case "run":
		var r api.RunRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
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
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		// Names and fingerprints for any caller; a break-glass run's
		// reason and incident only with a key (localAPI.ReceiptsList).
		result, err = a.ReceiptsList(ctx, r)
	case "receipts-checkpoint":
		// Signed here, with the service's runner key; the client writes
		// it where its caller asked.
		var r api.ReceiptsCheckpointRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.ReceiptsCheckpoint(ctx, r)
	case "receipts-export":
		var r api.ReceiptsExportRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		// Signed here, with the service's runner key, and sent over the
		// call's own socket as they are; a caller with no key of the
		// policy is refused (localAPI.ReceiptsExport).
		r.Out = f.IO.Out
		result, err = a.ReceiptsExport(ctx, r)
	case "replay":
		var r api.ReplayRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		// The service's own journal, policy, registry and history:
		// nothing the caller names. The verdicts name operations and
		// runners, and say why an entry fails, as receipts list does.
		result, err = serveReplay(ctx, a, f.IO.Out)
	case "receipts-prove":
		// Hashes and a signed tree head: nothing a plan binds.
		var r api.ReceiptsProveRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.ReceiptsProve(ctx, r)
	case "receipts-consistency":
		// Hashes of trees the caller's own notes sign: nothing a plan
		// binds.
		var r api.ReceiptsConsistencyRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.ReceiptsConsistency(ctx, r)
	case "receipts-show":
		var r api.ReceiptsShowRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		// A caller with no key of the policy reads each entry redacted:
		// what names and hashes the run, nothing the plan binds.
		result, err = serveReceiptsShow(ctx, a, r, sc.MayReadPlans())
	// Passkey enrolment: a code only for the service's operator
	// (localAPI.PasskeyCode); a begin by the caller's key or a code; a
	// finish judged against a challenge this service issued, once.
	case "passkey-code":
		var r api.PasskeyCodeRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.PasskeyCode(ctx, r)
	case "passkey-enroll-begin":
		var r api.PasskeyEnrollBeginRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.PasskeyEnrollBegin(ctx, r)
	case "passkey-enroll-finish":
		var r api.PasskeyEnrollFinishRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.PasskeyEnrollFinish(ctx, r)
	// The approval page's: a statement only for a caller whose key holds
	// role bridge (localAPI.PasskeyChallenge); a decision stored only when
	// a bridge signed it, its nonce is this service's for exactly its
	// statement and unspent, and the gate verifies it, whoever the caller.
	case "passkey-challenge":
		var r api.PasskeyChallengeRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.PasskeyChallenge(ctx, r)
	case "passkey-attested":
		var r api.PasskeyAttestedRequest
		if err := decodeArgs(req.Op, req.Args, &r); err != nil {
			return ExitUsage, err
		}
		result, err = a.PasskeyAttested(ctx, r)
	default:
		return ExitUsage, &localapi.UsageError{Msg: "the service has no typed form of " + req.Op}
	}
	var ans api.Answer
	code := ExitOK
	if err != nil {
		code = ExitCode(err)
		if r, ok := refusal.As(err); ok {
			ans.Refusal = r
		} else {
			ans.Error = apiError(err)
		}
	} else if ans.Result, err = json.Marshal(result); err != nil {
		return ExitSoftware, err
	} else if w, ok := result.(*api.WaitResult); ok && w.Pending {
		// For the log: a wait that ended pending, as --timeout's end.
		code = ExitTimeout
	} else if r, ok := result.(*api.RunResult); ok {
		// For the log: the program's.
		code = r.ExitCode
	}
	b, err := json.Marshal(ans)
	if err != nil {
		return ExitSoftware, err
	}
	if err := sc.Socket.Reply(b); err != nil {
		// The client stopped reading or went: nobody to tell.
		return ExitIOErr, nil
	}
	return code, nil
}

// keylessStatus is the redacted status of the plan stored under fp, read
// without asking the caller anything.
func keylessStatus(f *Factory, fp string) (*api.StatusResult, error) {
	plan, err := f.storedPlan(fp)
	if err != nil {
		return nil, err
	}
	return api.RedactedStatus(plan.Fingerprint, plan.Operation, plan.Target, plan.Mutating, localapi.FormatVersion), nil
}

// apiError is err as the service reports it to a typed call.
func apiError(err error) *api.Error {
	e := &api.Error{Code: errorCode(err), Exit: ExitCode(err), Message: err.Error()}
	var usage *localapi.UsageError
	switch {
	case errors.As(err, &usage):
		e.Hint = "see 'prod-write --help'"
	case errors.Is(err, keys.ErrNotAKey):
		e.Hint = "a key is the file `prod-write keygen --out FILE` writes (PKCS#8 PEM, mode 0600); its public line goes in trust.toml"
	}
	return e
}

// decodeArgs decodes a call's arguments strictly.
func decodeArgs(op string, b []byte, v any) error {
	if len(b) == 0 {
		return &localapi.UsageError{Msg: "the request carries no arguments"}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &localapi.UsageError{Msg: fmt.Sprintf("arguments of %s: %v", op, err)}
	}
	return nil
}
