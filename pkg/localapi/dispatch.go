package localapi

import (
	"context"
	"errors"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// handler serves one call in the runner service: its arguments decoded
// strictly into the call's request type, then the in-process API with the
// call's Env (ServeAPI has authorized it already).
type handler func(ctx context.Context, a API, sc *servicecall.Call, args []byte) (any, error)

// errNoReply ends a call without an answer: its client is gone.
var errNoReply = errors.New("the client is gone: no reply")

// argsError is arguments that do not decode: the call could not be made.
type argsError struct{ err error }

func (e *argsError) Error() string { return e.err.Error() }

// serve is the handler of call c: its request decoded, then fn.
func serve[Req, Res any](c api.Call[Req, Res], fn func(ctx context.Context, a API, sc *servicecall.Call, req Req) (*Res, error)) handler {
	return func(ctx context.Context, a API, sc *servicecall.Call, args []byte) (any, error) {
		var r Req
		if _, none := any(r).(api.None); !none {
			if err := DecodeArgs(c.Op, args, &r); err != nil {
				return nil, &argsError{err}
			}
		}
		res, err := fn(ctx, a, sc, r)
		if err != nil {
			return nil, err
		}
		return res, nil
	}
}

// method adapts an API method that needs nothing of the socket.
func method[Req, Res any](fn func(API, context.Context, Req) (*Res, error)) func(context.Context, API, *servicecall.Call, Req) (*Res, error) {
	return func(ctx context.Context, a API, _ *servicecall.Call, r Req) (*Res, error) { return fn(a, ctx, r) }
}

// handlers serve every call of the table (api.Calls), by op; a test keeps
// them equal.
var handlers = map[string]handler{}

func handle[Req, Res any](c api.Call[Req, Res], fn func(ctx context.Context, a API, sc *servicecall.Call, req Req) (*Res, error)) {
	handlers[c.Op] = serve(c, fn)
}

func init() {
	handle(api.CallOps, func(ctx context.Context, a API, _ *servicecall.Call, _ api.None) (*api.OpsResult, error) {
		return a.Ops(ctx)
	})
	handle(api.CallOpsShow, method(API.OpsShow))
	handle(api.CallWhoami, func(ctx context.Context, a API, _ *servicecall.Call, _ api.None) (*api.WhoamiResult, error) {
		return a.Whoami(ctx)
	})
	// Shell completion of a client: the fingerprints of the stored plans
	// with a prefix, as `status` and `receipts list` show them to any
	// caller (docs/adr/0024-completion-through-the-service.md).
	handle(api.CallPlansComplete, method(API.PlansComplete))
	handle(api.CallStatus, func(ctx context.Context, a API, _ *servicecall.Call, o api.StatusArgs) (*api.StatusResult, error) {
		if o.Wait {
			return nil, &argsError{&UsageError{Msg: "status --wait is the call status-wait"}}
		}
		return a.Status(ctx, api.StatusRequest{Fingerprint: o.Fingerprint})
	})
	handle(api.CallWait, func(_ context.Context, a API, _ *servicecall.Call, r api.WaitRequest) (*api.WaitResult, error) {
		res, err := ServeWait(a.Env, a, r)
		if a.Env.ClientGone() {
			// Nobody reads the answer, and what the judgement asked the
			// client for may be missing from it: end the call, silently.
			return nil, errNoReply
		}
		return res, err
	})
	// The calls that sign with the caller's key: a caller with no key of
	// the policy is refused by the key lookup (Env.Actor).
	handle(api.CallFile, method(API.File))
	handle(api.CallDecide, method(API.Decide))
	handle(api.CallGera, method(API.Gera))
	handle(api.CallWithdraw, method(API.Withdraw))
	handle(api.CallFreezeGrant, method(API.FreezeGrant))
	handle(api.CallBreakGlass, method(API.BreakGlass))
	handle(api.CallReview, method(API.BreakGlassReview))
	// An answer a bridge signed: stored only when a principal with role
	// bridge signed it and the service's own checks make that very
	// answer (bridge.Source.Admit), whoever the caller is.
	handle(api.CallAttested, method(API.AnswerAttested))
	handle(api.CallDecisionData, method(API.DecisionData))
	// The call's files are the descriptors the client handed over
	// (servicecall.Call.File: identity from the object). A caller with no
	// key of the policy plans as plans.Plan lets it: a dry run, with the
	// files it handed over, or nothing; it is asked for no file it did not
	// hand over, nor told a stored plan's path.
	handle(api.CallPlan, method(API.Plan))
	handle(api.CallRun, func(ctx context.Context, a API, sc *servicecall.Call, r api.RunRequest) (*api.RunResult, error) {
		// The gate decides, and a plan whose approval needs no key (a
		// standing go) runs for a caller with none. The program's stdin
		// is the descriptor handed over, its output goes through the
		// call's relay (Serve), never onto a descriptor of the caller's.
		f := a.Env
		res, err := a.Run(ctx, api.RunRequest{Fingerprint: r.Fingerprint, Stdin: f.IO.In, Stdout: f.IO.Out, Stderr: f.IO.Err})
		if sc.FinishOutput != nil {
			// The relay's sender is done before the reply is sent, on
			// the same socket (a refusal ends the relay here; a run
			// did, before its outcome receipt).
			sc.FinishOutput()
		}
		return res, err
	})
	// Names and fingerprints for any caller; a break-glass run's reason
	// and incident only unredacted.
	handle(api.CallReceiptsList, method(API.ReceiptsList))
	// Signed here, with the service's runner key; the client writes it
	// where its caller asked.
	handle(api.CallCheckpoint, method(API.ReceiptsCheckpoint))
	handle(api.CallExport, func(ctx context.Context, a API, _ *servicecall.Call, r api.ReceiptsExportRequest) (*api.ReceiptsExportResult, error) {
		// Signed here, with the service's runner key, and sent over the
		// call's own socket as they are.
		r.Out = a.Env.IO.Out
		return a.ReceiptsExport(ctx, r)
	})
	handle(api.CallReplay, func(ctx context.Context, a API, _ *servicecall.Call, r api.ReplayRequest) (*api.ReplayResult, error) {
		// The service's own journal, policy, registry and history:
		// nothing the caller names.
		return ServeReplay(ctx, a, r, a.Env.IO.Out)
	})
	handle(api.CallProve, method(API.ReceiptsProve))
	handle(api.CallConsistency, method(API.ReceiptsConsistency))
	handle(api.CallReceiptsShow, method(API.ReceiptsShow))
	handle(api.CallPasskeyCode, method(API.PasskeyCode))
	handle(api.CallEnrollBegin, method(API.PasskeyEnrollBegin))
	handle(api.CallEnrollFinish, method(API.PasskeyEnrollFinish))
	// The approval page's: a statement only for a caller whose key holds
	// role bridge; a decision stored only when a bridge signed it, its
	// nonce is this service's for exactly its statement and unspent, and
	// the gate verifies it, whoever the caller.
	handle(api.CallChallenge, method(API.PasskeyChallenge))
	handle(api.CallPasskeyDecide, method(API.PasskeyAttested))
}
