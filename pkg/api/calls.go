package api

// The calls of the API, as data: the one place each is declared, with
// its request and result types, its name on the runner service's socket,
// who may make it through the service and what a caller with no key of
// the policy sees of it (docs/API.md, "The calls", which a test keeps
// equal to this table). The service's dispatch, the socket client and
// the one authorization of every call (localapi's Authorize) derive from
// it.

// Access is who may make a call through the runner service, decided
// before any handler runs.
type Access string

const (
	// Anyone who may connect makes the call; what it then does is
	// decided by signatures (the key handed over, an envelope, a one-time
	// code) or by the gate, never by who connected.
	Anyone Access = "anyone"
	// Keyed calls show what plans bind: only a caller with a key of the
	// policy, or the service's operator, makes them; any other is refused
	// principal_unknown.
	Keyed Access = "keyed"
	// Operator calls are the service's operator's alone: root or the
	// service's own account; any other caller is refused role_missing.
	Operator Access = "operator"
)

// Keyless is what a caller with no key of the policy (and not the
// service's operator) gets of a call it may make.
type Keyless string

const (
	// KeylessWhole: the whole result, which binds nothing of a plan.
	KeylessWhole Keyless = "whole"
	// KeylessRedacted: the result without what plans bind (Redacted set).
	KeylessRedacted Keyless = "redacted"
	// KeylessRefused: nothing; the call is refused.
	KeylessRefused Keyless = "refused"
)

// CallInfo is one call, without its types.
type CallInfo struct {
	// Method is the call's method of [API].
	Method string
	// Op is its name on the runner service's socket.
	Op      string
	Access  Access
	Keyless Keyless
}

// Call is a call with its request and result types: Req is what goes on
// the socket ([None] for a call that sends nothing), Res what comes back.
type Call[Req, Res any] struct{ CallInfo }

// None is the request of a call that sends none.
type None struct{}

// StatusArgs is status's request on the socket: a fingerprint (Wait and
// Timeout are refused there: a wait is the call status-wait).
type StatusArgs struct {
	Fingerprint string
	Wait        bool
	Timeout     string
}

func call[Req, Res any](method, op string, access Access, keyless Keyless) Call[Req, Res] {
	return Call[Req, Res]{CallInfo{Method: method, Op: op, Access: access, Keyless: keyless}}
}

// The calls.
var (
	CallOps           = call[None, OpsResult]("Ops", "ops-list", Anyone, KeylessWhole)
	CallOpsShow       = call[OpsShowRequest, OpsShowResult]("OpsShow", "ops-show", Anyone, KeylessWhole)
	CallPlansComplete = call[PlansCompleteRequest, PlansCompleteResult]("PlansComplete", "plans-complete", Anyone, KeylessWhole)
	CallWhoami        = call[None, WhoamiResult]("Whoami", "whoami", Anyone, KeylessWhole)
	CallStatus        = call[StatusArgs, StatusResult]("Status", "status", Anyone, KeylessRedacted)
	CallWait          = call[WaitRequest, WaitResult]("Wait", "status-wait", Keyed, KeylessRefused)
	CallPlan          = call[PlanRequest, PlanResult]("Plan", "plan", Anyone, KeylessWhole)
	CallFile          = call[FileRequest, FileResult]("File", "file", Anyone, KeylessWhole)
	CallDecide        = call[DecideRequest, DecideResult]("Decide", "decide", Anyone, KeylessWhole)
	CallGera          = call[GeraRequest, GeraResult]("Gera", "gera", Anyone, KeylessWhole)
	CallWithdraw      = call[WithdrawRequest, WithdrawResult]("Withdraw", "withdraw", Anyone, KeylessWhole)
	CallFreezeGrant   = call[FreezeGrantRequest, FreezeGrantResult]("FreezeGrant", "freeze-grant", Anyone, KeylessWhole)
	CallBreakGlass    = call[BreakGlassRequest, BreakGlassResult]("BreakGlass", "break-glass", Anyone, KeylessWhole)
	CallRun           = call[RunRequest, RunResult]("Run", RunOp, Anyone, KeylessWhole)
	CallReview        = call[BreakGlassReviewRequest, BreakGlassReviewResult]("BreakGlassReview", "break-glass-review", Anyone, KeylessWhole)
	CallAttested      = call[AnswerAttestedRequest, AnswerAttestedResult]("AnswerAttested", "answer-attested", Anyone, KeylessWhole)
	CallDecisionData  = call[DecisionDataRequest, DecisionDataResult]("DecisionData", "decision-data", Keyed, KeylessRefused)
	CallReceiptsList  = call[ReceiptsListRequest, ReceiptsListResult]("ReceiptsList", "receipts-list", Anyone, KeylessRedacted)
	CallReceiptsShow  = call[ReceiptsShowRequest, ReceiptsShowResult]("ReceiptsShow", "receipts-show", Anyone, KeylessRedacted)
	CallCheckpoint    = call[ReceiptsCheckpointRequest, ReceiptsCheckpointResult]("ReceiptsCheckpoint", "receipts-checkpoint", Anyone, KeylessWhole)
	CallExport        = call[ReceiptsExportRequest, ReceiptsExportResult]("ReceiptsExport", "receipts-export", Keyed, KeylessRefused)
	CallReplay        = call[ReplayRequest, ReplayResult]("Replay", "replay", Anyone, KeylessWhole)
	CallProve         = call[ReceiptsProveRequest, ReceiptsProveResult]("ReceiptsProve", "receipts-prove", Anyone, KeylessWhole)
	CallConsistency   = call[ReceiptsConsistencyRequest, ReceiptsConsistencyResult]("ReceiptsConsistency", "receipts-consistency", Anyone, KeylessWhole)
	CallPasskeyCode   = call[PasskeyCodeRequest, PasskeyCodeResult]("PasskeyCode", "passkey-code", Operator, KeylessRefused)
	CallEnrollBegin   = call[PasskeyEnrollBeginRequest, PasskeyEnrollBeginResult]("PasskeyEnrollBegin", "passkey-enroll-begin", Anyone, KeylessWhole)
	CallEnrollFinish  = call[PasskeyEnrollFinishRequest, PasskeyEnrollFinishResult]("PasskeyEnrollFinish", "passkey-enroll-finish", Anyone, KeylessWhole)
	CallChallenge     = call[PasskeyChallengeRequest, PasskeyChallengeResult]("PasskeyChallenge", "passkey-challenge", Anyone, KeylessWhole)
	CallPasskeyDecide = call[PasskeyAttestedRequest, PasskeyAttestedResult]("PasskeyAttested", "passkey-attested", Anyone, KeylessWhole)
)

// Calls is every call, in docs/API.md's order.
var Calls = []CallInfo{
	CallOps.CallInfo, CallOpsShow.CallInfo, CallPlansComplete.CallInfo, CallWhoami.CallInfo, CallStatus.CallInfo,
	CallPlan.CallInfo, CallWait.CallInfo, CallFile.CallInfo, CallDecide.CallInfo, CallGera.CallInfo,
	CallWithdraw.CallInfo, CallFreezeGrant.CallInfo, CallBreakGlass.CallInfo, CallRun.CallInfo, CallReview.CallInfo,
	CallAttested.CallInfo, CallDecisionData.CallInfo, CallReceiptsList.CallInfo, CallCheckpoint.CallInfo,
	CallExport.CallInfo, CallReplay.CallInfo, CallProve.CallInfo, CallConsistency.CallInfo,
	CallPasskeyCode.CallInfo, CallEnrollBegin.CallInfo, CallEnrollFinish.CallInfo, CallChallenge.CallInfo,
	CallPasskeyDecide.CallInfo, CallReceiptsShow.CallInfo,
}

// Ops are the calls' names on the socket: the only ops the service takes.
func Ops() []string {
	out := make([]string, len(Calls))
	for i, c := range Calls {
		out[i] = c.Op
	}
	return out
}

// CallOf is the call named op on the socket.
func CallOf(op string) (CallInfo, bool) {
	for _, c := range Calls {
		if c.Op == op {
			return c, true
		}
	}
	return CallInfo{}, false
}
