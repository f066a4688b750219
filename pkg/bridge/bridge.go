// Package bridge holds what Trinity's bridges (docs/DESIGN.md §11) share, whatever the
// channel: the [View] of a decision they show (built from the signed plan,
// the certainty record and the gate's own verdict), the [Attestor] that
// turns an approver's authenticated click or comment into an answer signed
// with the bridge's key, the [Ledger] of where each decision was posted, and
// the [Poster] fan-out that `file` and `withdraw` call.
//
// # What a bridge may sign
//
// A bridge answer names the approver principal and the channel evidence
// (Slack user, team and action timestamp, or GitHub login, repository and
// comment id). The gate accepts it only when the signer holds the bridge
// role and the channel identity maps, in the trust policy, to exactly that
// approver; separation of duties is then judged on the approver, as for an
// answer given on the CLI. The attestor refuses before signing what the gate
// would refuse after, so a bridge never stores an answer that cannot count.
// See docs/BRIDGES.md for the threat model.
//
// # Idempotence
//
// An answer's payload is a function of the click or comment alone (its
// issue time is the action's or comment's timestamp, never the bridge's
// clock), so the same click always signs to the same record id and the
// store's PutEvidence makes a retry a no-op. The attestor also looks for an
// answer with the same channel evidence before it judges anything, so a
// retry never makes a second record even when the trust policy changed in
// between, and a click or comment read again once it is older than an
// answer lives (a restarted bridge's first poll) is already recorded, not
// refused.
package bridge

import (
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// Channel kinds of [approval.Channel].
const (
	KindSlack  = "slack"
	KindGitHub = "github"
)

// Source is where a bridge reads plans, evidence and the rules that judge
// them.
type Source struct {
	Policy   *approval.Policy
	Registry *operations.Registry
	Store    store.Store
	// Diffs, when set, has views show approvers what a file parameter
	// changes (see [DiffRules]); nil shows none.
	Diffs *DiffRules
	// Read, when set, reads what a judgement of a plan needs from
	// elsewhere than Store: a bridge that is a client of the runner
	// service reads it through the service's DecisionData (ADR 0045), and
	// judges it here, by Policy and Registry, as [Judge] judges what
	// [Gather] reads. Every envelope it returns is verified here, so the
	// service can withhold what it holds but not make anything up.
	Read func(fp string) (*Input, error)
	// Page, when set, is the origin of the approval page the deployment
	// serves: views link to it (docs/adr/0048-approval-page.md).
	Page string
	// Live, when set, holds the policy and registry the runner service
	// loaded last: Now puts them in place of Policy and Registry, so that
	// every bridge judges by what a reload (SIGHUP) loaded, at once
	// (docs/DEPLOYMENT.md, "Reloading and stopping").
	Live *Live
}

// Live is the policy and registry the runner service judges by now, for
// bridges that run inside it.
type Live struct {
	v atomic.Pointer[loaded]
}

type loaded struct {
	policy   *approval.Policy
	registry *operations.Registry
}

// NewLive holds policy and registry.
func NewLive(policy *approval.Policy, registry *operations.Registry) *Live {
	l := &Live{}
	l.Set(policy, registry)
	return l
}

// Set replaces what l holds: the service's reload.
func (l *Live) Set(policy *approval.Policy, registry *operations.Registry) {
	l.v.Store(&loaded{policy: policy, registry: registry})
}

// Now is s with the policy and registry judged by now: those Live holds,
// when it is set. Each bridge takes it once per request, so one request is
// judged by one policy.
func (s Source) Now() Source {
	if s.Live != nil {
		if l := s.Live.v.Load(); l != nil {
			s.Policy, s.Registry = l.policy, l.registry
		}
	}
	return s
}

// Input is what a judgement of one plan reads of the store: the plan,
// its evidence (and what of it could not be read), how often each piece
// was spent, and the break-glass history of whoever broke glass on it.
type Input struct {
	Plan            *approval.Envelope         `json:"plan"`
	Evidence        []*approval.Envelope       `json:"evidence"`
	Problems        []store.Problem            `json:"problems"`
	History         approval.BreakGlassHistory `json:"history"`
	HistoryProblems []string                   `json:"history_problems"`
	Used            map[string]int             `json:"used"`
	// Contents are the plan's files' content kept with it, by sum: what
	// approvers are shown of each ([DiffRules]). A file whose content is
	// not kept has none.
	Contents map[string][]byte `json:"contents,omitempty"`
}

// Gather reads, from src.Store, what [Judge] judges of the plan stored
// under fp: a refusal plan_absent when there is none.
func Gather(src Source, fp string) (*Input, error) {
	if err := store.CheckFingerprint(fp); err != nil {
		return nil, refusal.New(refusal.PlanAbsent, "%v", err).For("", fp)
	}
	env, err := src.Store.GetPlan(fp)
	if errors.Is(err, store.ErrNotFound) {
		return nil, refusal.New(refusal.PlanAbsent, "no plan with this fingerprint is stored").For("", fp)
	}
	if err != nil {
		return nil, fmt.Errorf("reading plan: %w", err)
	}
	evidence, problems, err := src.Store.Evidence(fp)
	if err != nil {
		return nil, fmt.Errorf("reading evidence: %w", err)
	}
	hist, histProblems, err := runner.BreakGlassHistory(src.Store, src.Policy, fp, evidence)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(evidence))
	for _, e := range evidence {
		if id, err := approval.ID(e); err == nil {
			ids = append(ids, id)
		}
	}
	used, err := src.Store.Used(ids)
	if err != nil {
		return nil, fmt.Errorf("reading consumption: %w", err)
	}
	return &Input{Plan: env, Evidence: evidence, Problems: problems, History: hist, HistoryProblems: histProblems, Used: used, Contents: Contents(src.Store, src.Policy, src.Registry, env)}, nil
}

// Contents reads from st the content kept for the files of the plan env,
// as far as approvers are shown it: at most [DiffMaxInput] bytes each, and
// none of a file reg's operation marks secret.
// What cannot be read is left out: its file is shown as not kept. The
// plan's signature is checked by whoever judges it, and each content's
// sum against the plan by [Kept].
func Contents(st store.Store, policy *approval.Policy, reg *operations.Registry, env *approval.Envelope) map[string][]byte {
	if reg == nil {
		return nil
	}
	plan, _, err := policy.DecodePlan(env)
	if err != nil {
		return nil
	}
	op, ok := reg.Get(plan.Operation)
	if !ok {
		return nil
	}
	var out map[string][]byte
	for _, f := range plan.Files {
		if f.Size > DiffMaxInput || op.Files[f.Name].Secret {
			continue
		}
		if data, err := st.Content(f.SHA256); err == nil {
			if out == nil {
				out = map[string][]byte{}
			}
			out[f.SHA256] = data
		}
	}
	return out
}

// read is what a judgement of fp reads: through src.Read when set, else
// from src.Store.
func (src Source) read(fp string) (*Input, error) {
	if err := store.CheckFingerprint(fp); err != nil {
		return nil, refusal.New(refusal.PlanAbsent, "%v", err).For("", fp)
	}
	if src.Read != nil {
		return src.Read(fp)
	}
	return Gather(src, fp)
}

// View is a decision as a bridge shows it: the plan, the certainty record
// it asks about, the answers so far and the gate's verdict now.
type View struct {
	Plan     *operations.Plan
	RecordID string
	// Record is nil when no record with RecordID is stored for the plan,
	// its signature does not verify or the gate cannot read it.
	Record *approval.CertaintyRecord
	// RecordProblem says why the record does not count, or "": with a nil
	// Record, why the gate cannot read the record.
	RecordProblem string
	Answers       []AnswerView
	// Gate is "open" when run would pass the gate now, else the refusal
	// code; GateWhy and Missing explain it.
	Gate      string
	GateWhy   string
	Missing   []string
	Withdrawn bool
	Vetoed    bool
	// Approvers is how many approvals the operation needs.
	Approvers int
	// Diffs are what the plan's file parameters change, shown while the
	// decision is open (see [DiffRules]).
	Diffs []FileDiff
	Now   time.Time
	// PageURL is the decision on the approval page, or "" when none is
	// served.
	PageURL string
}

// AnswerView is one Trinity answer as the gate assessed it.
type AnswerView struct {
	ID      string
	By      string
	Verdict string
	Record  string
	Issued  time.Time
	Channel *approval.Channel
	Valid   bool
	Why     string
	// Unreadable: the gate could not read the answer (its payload is not
	// strict JSON of an answer); it says nothing and does not count.
	Unreadable bool
	// Passkey: a decision its approver's passkey signed (on the approval
	// page), whether or not it verified.
	Passkey bool
}

// Closed reports whether the decision can no longer change what runs: the
// plan was withdrawn or vetoed, or the record no longer counts.
func (v *View) Closed() bool {
	return v.Withdrawn || v.Vetoed || v.Record == nil || v.RecordProblem != ""
}

// Describe builds the view of record recordID of the plan fp as it stands
// at now. It returns a refusal (plan_absent, operation_absent, or the
// plan's own signature problem) when there is no plan to show.
func Describe(src Source, fp, recordID string, now time.Time) (*View, error) {
	j, err := Judge(src, fp, now)
	if err != nil {
		return nil, err
	}
	return j.View(recordID), nil
}

// Judgement is the gate's verdict on a stored plan, for display: what
// [Describe] and [BuildRequest] are made of.
type Judgement struct {
	Plan     *operations.Plan
	Op       *operations.Operation
	Decision *approval.Decision
	// Refusal is why the gate is closed; nil when it is open.
	Refusal *refusal.Error
	Now     time.Time
	// Diffs are the rules the view's diffs are read by; nil reads none.
	Diffs *DiffRules
	// Page is the approval page's origin, or "".
	Page string
	// Contents are the plan's files' content kept with it, by sum.
	Contents map[string][]byte
	// Runs is how many runs of the plan the store has counted: the uses
	// spent of its evidence (a run spends one use of the anchor it ran
	// on; docs/adr/0006-consumption.md).
	Runs int
}

// Judge evaluates the gate over the plan stored under fp and its evidence,
// as run would (without recomputing the fingerprint from reality, which
// only the runner can, or running a precondition check): with what run
// reads besides the evidence, the evidence the store could not read and
// the break-glass history of whoever broke glass on the plan
// ([runner.BreakGlassHistory]), either of which can close the gate. It
// returns a refusal (plan_absent, operation_absent, or the plan's own
// signature problem) when there is no plan to judge.
func Judge(src Source, fp string, now time.Time) (*Judgement, error) {
	in, err := src.read(fp)
	if err != nil {
		return nil, err
	}
	if in.Plan == nil {
		return nil, refusal.New(refusal.PlanAbsent, "no plan with this fingerprint is stored").For("", fp)
	}
	plan, _, err := src.Policy.DecodePlan(in.Plan)
	if err != nil {
		return nil, err
	}
	if plan.Fingerprint != fp {
		return nil, refusal.New(refusal.FingerprintMismatch, "the plan stored under this fingerprint is for %s", plan.Fingerprint).For(plan.Operation, fp)
	}
	op, ok := src.Registry.Get(plan.Operation)
	if !ok {
		return nil, refusal.New(refusal.OperationAbsent, "operation %q is no longer in the registry", plan.Operation).For(plan.Operation, fp)
	}
	dec, gateErr := approval.Evaluate(approval.Input{Plan: in.Plan, Evidence: in.Evidence, Unreadable: append(runner.ProblemStrings(in.Problems), in.HistoryProblems...),
		Policy: src.Policy, Op: op, Now: now, Used: in.Used, BreakGlass: in.History, PreconditionUnchecked: true})
	j := &Judgement{Plan: plan, Op: op, Decision: dec, Now: now, Diffs: src.Diffs, Page: src.Page, Contents: in.Contents}
	for _, n := range in.Used {
		j.Runs += n
	}
	if r, ok := refusal.As(gateErr); ok {
		j.Refusal = r
	} else if gateErr != nil {
		return nil, gateErr
	}
	return j, nil
}

// View is the judgement shown as the decision on recordID.
func (j *Judgement) View(recordID string) *View {
	plan, op, dec, now, fp := j.Plan, j.Op, j.Decision, j.Now, j.Plan.Fingerprint
	v := &View{Plan: plan, RecordID: recordID, Gate: "open", Approvers: op.Approval.Approvers, Now: now}
	if j.Page != "" {
		v.PageURL = j.Page + "/approve/" + url.PathEscape(fp)
	}
	if r := j.Refusal; r != nil {
		v.Gate, v.GateWhy, v.Missing = string(r.Code), r.Reason, r.Missing
		v.Withdrawn = r.Code == refusal.Withdrawn
		v.Vetoed = r.Code == refusal.Vetoed
	}
	if dec == nil {
		return v
	}
	defer func() {
		// Only while an answer can still matter: once the decision is
		// closed (or the gate open, and the file perhaps replaced) a
		// diff would show something other than what was decided.
		if j.Diffs != nil && !v.Closed() && v.Gate != "open" {
			v.Diffs = j.Diffs.Diffs(plan, op, j.Contents)
		}
	}()
	for _, a := range dec.Evidence {
		switch {
		case a.Kind == approval.KindRecord && a.ID == recordID && a.Signed != nil:
			// Decoded as the gate decoded it (strictly): a record the
			// gate cannot read is shown as unreadable, never as what a
			// looser reading makes of it.
			var c approval.CertaintyRecord
			if err := a.Signed.Decode(&c); err != nil {
				v.RecordProblem = a.Why
			} else if c.Fingerprint == fp {
				v.Record = &c
				if !a.Valid {
					v.RecordProblem = a.Why
				}
			}
		case a.Kind == approval.KindAnswer && a.Signed != nil:
			v.Answers = append(v.Answers, AnswerView{ID: a.ID, By: a.By, Verdict: a.Verdict, Record: a.Record,
				Issued: a.Issued, Channel: a.Channel, Valid: a.Valid, Why: a.Why,
				Unreadable: a.Problem != nil && *a.Problem == refusal.EvidenceUnreadable, Passkey: a.Signed.Type == approval.TypePasskey})
		}
	}
	return v
}

// Request is the judgement as a decision request ([BuildRequest]).
func (j *Judgement) Request(policy *approval.Policy, posts []Post, events []Event, s Settings) *DecisionRequest {
	in := RequestInput{Plan: j.Plan, Op: j.Op, Policy: policy, Refusal: j.Refusal, Posts: posts, Events: events, Settings: s.For(j.Op), Now: j.Now}
	if j.Decision != nil {
		in.Evidence = j.Decision.Evidence
	}
	return BuildRequest(in)
}
