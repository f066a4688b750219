// Package api is prod-write's application API (docs/DESIGN.md §13, §14; docs/API.md):
// each call's request, result and refusal as Go types, which every front
// end drives and renders for itself. Two implementations share [API]: one
// in-process, for local mode, and the runner service's socket client, for
// service mode; the service answers a call with the same types, encoded as
// JSON under [Version], never with text it rendered. Like tailscaled's
// LocalAPI, what a caller may read is decided per call, in the service,
// from the caller's credentials ([Redact]).
//
// The calls here are ops list and show, whoami, plan, status and its wait,
// the calls that add a signed record to a plan (file, decide, gera,
// withdraw, freeze grant, break-glass and its review), run, receipts list,
// show, checkpoint, export, prove and consistency, replay, passkey
// enrolment (a one-time code, begin and finish), the approval page's
// passkey challenge and attested decision, and shell completion's
// (docs/API.md).
package api

import (
	"context"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runapi"
	"github.com/prod-write/prod-write/pkg/store"
)

// Version is the version of the types on the socket (runapi.Version).
const Version = runapi.Version

// API is the application's calls. A refusal is a *refusal.Error, returned
// as the error; any other error is the call failing.
type API interface {
	// Ops returns the operation registry.
	Ops(ctx context.Context) (*OpsResult, error)
	// OpsShow returns one operation's definition.
	OpsShow(ctx context.Context, req OpsShowRequest) (*OpsShowResult, error)
	// Whoami returns the principal of the caller's key.
	Whoami(ctx context.Context) (*WhoamiResult, error)
	// Status judges a stored plan as run would now. A gate that says no
	// is the result's Refusal, not an error.
	Status(ctx context.Context, req StatusRequest) (*StatusResult, error)
	// Wait is Status once the plan's decision request is no longer
	// pending, or once req.Timeout passes or ctx ends (Pending).
	Wait(ctx context.Context, req WaitRequest) (*WaitResult, error)

	// File stores an operator's certainty record for a plan (role
	// operator; not the planner).
	File(ctx context.Context, req FileRequest) (*FileResult, error)
	// Decide stores an approver's approve or deny of a plan's certainty
	// record (role approver; a deny may come from anyone holding it).
	Decide(ctx context.Context, req DecideRequest) (*DecideResult, error)
	// Gera stores a standing go or no-go for a plan (role gera).
	Gera(ctx context.Context, req GeraRequest) (*GeraResult, error)
	// Withdraw stores the planner's withdrawal of its own plan.
	Withdraw(ctx context.Context, req WithdrawRequest) (*WithdrawResult, error)
	// FreezeGrant stores a grant of a plan through one freeze (role
	// freeze; not the planner).
	FreezeGrant(ctx context.Context, req FreezeGrantRequest) (*FreezeGrantResult, error)
	// BreakGlass stores a break-glass record for a plan (role
	// break-glass).
	BreakGlass(ctx context.Context, req BreakGlassRequest) (*BreakGlassResult, error)
	// BreakGlassReview stores a review of a break-glass run and writes it
	// to the journal (role approver; not the breaker).
	BreakGlassReview(ctx context.Context, req BreakGlassReviewRequest) (*BreakGlassReviewResult, error)
	// AnswerAttested stores an answer a bridge signed for a click or
	// comment it authenticated, once the service's own checks make that
	// very answer (signed by a principal with role bridge).
	AnswerAttested(ctx context.Context, req AnswerAttestedRequest) (*AnswerAttestedResult, error)
	// DecisionData returns what a judgement of one stored plan reads of
	// the store, for a bridge to judge by its own policy (a caller with a
	// key of the policy).
	DecisionData(ctx context.Context, req DecisionDataRequest) (*DecisionDataResult, error)
	// Plan validates, resolves and fingerprints an invocation and, with
	// the caller's agent key, stores the signed plan.
	Plan(ctx context.Context, req PlanRequest) (*PlanResult, error)
	// Run runs an approved plan: gate, consumption, intent, the program,
	// outcome. A program that ran is a result whatever its exit status;
	// an error is a refusal (nothing ran) or a failure. ctx does not end
	// a run: once asked for, its order is the runner's.
	Run(ctx context.Context, req RunRequest) (*RunResult, error)

	// PlansComplete returns the fingerprints of the stored plans whose
	// hex digits start with a prefix, for shell completion: what any
	// caller may read (names and fingerprints), no key needed.
	PlansComplete(ctx context.Context, req PlansCompleteRequest) (*PlansCompleteResult, error)

	// ReceiptsList returns one page of the journal's entries, unverified;
	// a caller with no key of the policy reads break-glass runs without
	// their reason and incident.
	ReceiptsList(ctx context.Context, req ReceiptsListRequest) (*ReceiptsListResult, error)
	// ReceiptsCheckpoint signs the journal's head (count and hash of the
	// last complete line) with the runner key.
	ReceiptsCheckpoint(ctx context.Context, req ReceiptsCheckpointRequest) (*ReceiptsCheckpointResult, error)
	// ReceiptsExport writes each run of the journal to req.Out as an
	// in-toto attestation the runner key signs; every entry must verify,
	// or nothing more is exported (a data error). It shows what plans
	// bind: a caller with no key of the policy is refused.
	ReceiptsExport(ctx context.Context, req ReceiptsExportRequest) (*ReceiptsExportResult, error)
	// Replay replays the service's own journal, each entry's verdict to
	// req.Each; a journal that is not receipts at all is a data error.
	Replay(ctx context.Context, req ReplayRequest) (*ReplayResult, error)
	// ReceiptsProve proves one receipt included in the journal's Merkle
	// tree, with a signed checkpoint of that tree.
	ReceiptsProve(ctx context.Context, req ReceiptsProveRequest) (*ReceiptsProveResult, error)
	// ReceiptsConsistency proves the tree of one checkpoint note a prefix
	// of another's, once both verify under a runner key of the policy and
	// the journal holds both trees.
	ReceiptsConsistency(ctx context.Context, req ReceiptsConsistencyRequest) (*ReceiptsConsistencyResult, error)
	// PasskeyCode issues a one-time code authorising one passkey
	// enrolment of a principal (the service's operator only).
	PasskeyCode(ctx context.Context, req PasskeyCodeRequest) (*PasskeyCodeResult, error)
	// PasskeyEnrollBegin begins a passkey enrolment, authorised by the
	// caller's key or a one-time code: the WebAuthn creation options.
	PasskeyEnrollBegin(ctx context.Context, req PasskeyEnrollBeginRequest) (*PasskeyEnrollBeginResult, error)
	// PasskeyEnrollFinish verifies a registration response against the
	// enrolment whose challenge it answers (spending it) and returns the
	// credential as a trust.toml snippet.
	PasskeyEnrollFinish(ctx context.Context, req PasskeyEnrollFinishRequest) (*PasskeyEnrollFinishResult, error)
	// PasskeyChallenge issues the statement an approver's passkey signs
	// on the approval page, with a single-use nonce (a caller whose key
	// holds role bridge).
	PasskeyChallenge(ctx context.Context, req PasskeyChallengeRequest) (*PasskeyChallengeResult, error)
	// PasskeyAttested stores a passkey decision the approval page's
	// server signed with its bridge key, once its nonce is the service's
	// for exactly its statement, unspent, and its assertion verifies in
	// the gate.
	PasskeyAttested(ctx context.Context, req PasskeyAttestedRequest) (*PasskeyAttestedResult, error)
	// ReceiptsShow returns the journal entries of one run or one
	// sequence number; a caller with no key of the policy reads them
	// redacted (ReceiptEntry).
	ReceiptsShow(ctx context.Context, req ReceiptsShowRequest) (*ReceiptsShowResult, error)
}

// OpsResult is the registry.
type OpsResult struct {
	Operations []*operations.Operation `json:"operations"`
	// PolicyDigest is the digest of the trust policy runs are judged by
	// (their receipts' policy_digest): the runner service's loaded one, or
	// in local mode the one on disk; empty when it does not load. doctor
	// checks the service's against the history.
	PolicyDigest string `json:"policy_digest,omitempty"`
}

// OpsShowRequest names an operation of the registry.
type OpsShowRequest struct {
	Name string `json:"name"`
}

// OpsShowResult is one operation's definition, as hashed (its digest
// checks).
type OpsShowResult struct {
	Operation *operations.Operation `json:"operation"`
}

// PlansCompleteRequest is a fingerprint prefix: lowercase hex digits,
// with or without "sha256:".
type PlansCompleteRequest struct {
	Prefix string `json:"prefix"`
}

// PlansCompleteResult is the fingerprints found, sorted.
type PlansCompleteResult struct {
	Fingerprints []string `json:"fingerprints"`
}

// WhoamiResult is the principal of the caller's key.
type WhoamiResult struct {
	Principal *approval.Principal `json:"principal"`
}

// StatusRequest names a stored plan.
type StatusRequest struct {
	Fingerprint string `json:"fingerprint"`
}

// StatusResult is what status knows of a stored plan. Its JSON is `status
// --json` (docs/JSON.md): the fields are in the order of their names.
type StatusResult struct {
	Allowed     bool                  `json:"allowed"`
	Evidence    []*approval.Assessed  `json:"evidence"`
	Explanation *approval.Explanation `json:"explanation"`
	// Files are what the plan's files hold, as approvers are shown them:
	// from the content kept with the plan, never a path read again
	// (docs/adr/0063-file-content-kept-with-the-plan.md).
	Files         []bridge.FileDiff             `json:"files,omitempty"`
	Fingerprint   string                        `json:"fingerprint"`
	FormatVersion int                           `json:"format_version"`
	Mutating      bool                          `json:"mutating"`
	Operation     string                        `json:"operation"`
	Path          string                        `json:"path"`
	Plan          *operations.Plan              `json:"plan,omitempty"`
	Planner       string                        `json:"planner"`
	Precondition  *operations.PreconditionBound `json:"precondition,omitempty"`
	// PreconditionUnchecked: status does not run the check; run runs it
	// again before consuming anything.
	PreconditionUnchecked bool                    `json:"precondition_unchecked,omitempty"`
	Problems              []store.Problem         `json:"problems"`
	Redacted              bool                    `json:"redacted,omitempty"`
	Refusal               *refusal.Error          `json:"refusal,omitempty"`
	Request               *bridge.DecisionRequest `json:"request,omitempty"`
	Target                string                  `json:"target"`
	// ApprovalPage is the plan's page on the approval page, where an
	// approver decides with a passkey; absent when the deployment serves
	// none ([bridge] page_listen, docs/adr/0048-approval-page.md).
	ApprovalPage string `json:"approval_page,omitempty"`
}

// RedactedStatus is the status a caller with no key of the policy reads
// (docs/adr/0036-the-service-never-waits-on-a-caller.md): the plan's
// operation, target and fingerprint, and nothing it binds (argv, params,
// file paths, environment values), nor the gate's judgement, which would
// need the caller's files and environment and quotes them. Refusal says
// why.
func RedactedStatus(fingerprint, operation, target string, mutating bool, formatVersion int) *StatusResult {
	why := "what the gate says of a plan, and what the plan binds, is shown only to a caller with a key of the trust policy"
	return &StatusResult{
		Fingerprint: fingerprint, Operation: operation, Target: target, Mutating: mutating,
		FormatVersion: formatVersion,
		Evidence:      []*approval.Assessed{},
		Problems:      []store.Problem{},
		Explanation:   &approval.Explanation{Sentence: why},
		Refusal:       &refusal.Error{Code: refusal.PrincipalUnknown, Reason: why, Fingerprint: fingerprint, Operation: operation, Missing: []string{"--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml"}},
		Redacted:      true,
	}
}

// RunOp is the run call's name on the socket, runapi's (api.CallRun).
const RunOp = runapi.RunOp

// The run call's types and the answer's envelope are runapi's, so a run
// client links them without the domain (pkg/runapi).
type (
	RunRequest = runapi.RunRequest
	RunResult  = runapi.RunResult
	Answer     = runapi.Answer
	Notice     = runapi.Notice
	Error      = runapi.Error
)

// The kinds of Notice.
const (
	NoticeWarning   = runapi.NoticeWarning
	NoticePosted    = runapi.NoticePosted
	NoticeWithdrawn = runapi.NoticeWithdrawn
	NoticeNotified  = runapi.NoticeNotified
)

// Decode reads an Answer into result, or returns its refusal or error;
// its notices are returned in either case.
func Decode(b []byte, result any) ([]Notice, error) { return runapi.Decode(b, result) }
