package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/visible"
)

// Request states. A request is pending until the gate opens (approved), a
// veto lands (denied), the planner withdraws the plan (withdrawn) or its
// expiry passes with the gate still closed (expired). Every state but
// pending is final for the request: a new certainty record makes a new
// request (another id).
const (
	RequestPending   = "pending"
	RequestApproved  = "approved"
	RequestDenied    = "denied"
	RequestWithdrawn = "withdrawn"
	RequestExpired   = "expired"
)

// DefaultRequestTTL is how long a request for which no certainty record
// was filed stays open (requests.ttl).
const DefaultRequestTTL = 24 * time.Hour

// Settings are the request rules of prod-write.toml's [requests].
type Settings struct {
	// TTL bounds a request with no certainty record yet, from the plan's
	// creation; once a record is filed the request expires with it.
	TTL time.Duration
	// RemindAfter and EscalateAfter count from the decision's post; 0
	// turns each off.
	RemindAfter, EscalateAfter time.Duration
	// EscalateSlack is the Slack channel the decision is posted to again
	// on escalation; EscalateGitHub who is mentioned on GitHub.
	EscalateSlack, EscalateGitHub string
}

// For is s with op's overrides ([operations.RequestRules]) applied: the
// operation's registry entry wins over the deployment's [requests]. An
// operation that sets an escalation target without escalate_after
// escalates after the deployment's escalate_after, or DefaultEscalateAfter
// when that is off.
func (s Settings) For(op *operations.Operation) Settings {
	if op == nil || op.Requests == nil {
		return s
	}
	r := op.Requests
	ttl, remind, escalate := r.Durations()
	if ttl != nil {
		s.TTL = *ttl
	}
	if remind != nil {
		s.RemindAfter = *remind
	}
	if r.EscalateSlackChannel != "" {
		s.EscalateSlack = r.EscalateSlackChannel
	}
	if r.EscalateGitHub != "" {
		s.EscalateGitHub = r.EscalateGitHub
	}
	if (r.EscalateSlackChannel != "" || r.EscalateGitHub != "") && s.EscalateAfter == 0 {
		s.EscalateAfter = DefaultEscalateAfter
	}
	if escalate != nil {
		s.EscalateAfter = *escalate
	}
	return s
}

// DefaultEscalateAfter is requests.escalate_after when an escalation
// target is set and no time is.
const DefaultEscalateAfter = 45 * time.Minute

// DecisionRequest is a plan's decision request: the thing an agent waits on. It is
// derived, never stored: from the signed plan and evidence as the gate
// judges them, where the decision was posted (the ledger) and what the
// bridges did since (the events). The gate decides nothing from it.
type DecisionRequest struct {
	ID          string    `json:"id"`
	Fingerprint string    `json:"fingerprint"`
	State       string    `json:"state"`
	Record      string    `json:"record,omitempty"`
	Missing     []string  `json:"missing"`
	Asked       []Asked   `json:"asked"`
	Expires     time.Time `json:"expires"`
	// Decision is who decided and how, once the state is approved or
	// denied.
	Decision *Outcome `json:"decision,omitempty"`
	Events   []Event  `json:"events"`
}

// Asked is one place the request was put, and to whom.
type Asked struct {
	// Channel is "cli", "slack" or "github".
	Channel string `json:"channel"`
	// Role is the role that can answer there; Who the principals holding
	// it who may (the planner and the filer are never asked to approve).
	Role string   `json:"role"`
	Who  []string `json:"who"`
	// What says what the principals asked would do: "gera go",
	// "file a certainty record", "approve or deny".
	What         string `json:"what"`
	SlackChannel string `json:"slack_channel,omitempty"`
	SlackThread  string `json:"slack_thread,omitempty"`
	GitHubRepo   string `json:"github_repo,omitempty"`
	GitHubIssue  int    `json:"github_issue,omitempty"`
	URL          string `json:"url,omitempty"`
	// Escalation marks a place the request was escalated to.
	Escalation bool `json:"escalation,omitempty"`
}

// Outcome is the decision that closed a request.
type Outcome struct {
	Verdict string `json:"verdict"` // approve, go, deny, no-go
	By      string `json:"by"`
	// Via is where it was given: "cli", "slack" or "github".
	Via string `json:"via"`
	// Reason is the decider's reason verbatim (a deny's tells the agent
	// what to change).
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// RequestInput is what a request is derived from.
type RequestInput struct {
	Plan     *operations.Plan
	Op       *operations.Operation
	Policy   *approval.Policy
	Evidence []*approval.Assessed
	// Refusal is the gate's verdict now; nil when it is open.
	Refusal  *refusal.Error
	Posts    []Post
	Events   []Event
	Settings Settings
	Now      time.Time
}

// RequestID names the request about record (or, before one is filed,
// "") of plan fp.
func RequestID(fp, record string) string {
	sum := sha256.Sum256([]byte("prod-write request\x00" + fp + "\x00" + record))
	return "req-" + hex.EncodeToString(sum[:10])
}

// BuildRequest derives the request of in.Plan; nil when the plan needs no
// human (a non-mutating operation).
func BuildRequest(in RequestInput) *DecisionRequest {
	if !in.Plan.Mutating {
		return nil
	}
	record := currentRecord(in.Evidence)
	r := &DecisionRequest{Fingerprint: in.Plan.Fingerprint, Missing: []string{}, Asked: []Asked{}, Events: []Event{}}
	ttl := in.Settings.TTL
	if ttl <= 0 {
		ttl = DefaultRequestTTL
	}
	r.Expires = in.Plan.Created.Add(ttl).UTC()
	if record != nil {
		r.Record = record.ID
		r.Expires = record.Expires.UTC()
	}
	r.ID = RequestID(in.Plan.Fingerprint, r.Record)
	filer := ""
	if record != nil {
		filer = record.By
	}
	if in.Op.Accepts(operations.PathGera) {
		r.Asked = append(r.Asked, Asked{Channel: "cli", Role: approval.RoleGera, What: "gera go",
			Who: holders(in.Policy, approval.RoleGera, in.Plan.Planner, "")})
	}
	if in.Op.Accepts(operations.PathSmithTrinity) {
		if record == nil {
			r.Asked = append(r.Asked, Asked{Channel: "cli", Role: approval.RoleOperator, What: "file a certainty record",
				Who: holders(in.Policy, approval.RoleOperator, in.Plan.Planner, "")})
		} else {
			approvers := holders(in.Policy, approval.RoleApprover, in.Plan.Planner, filer)
			r.Asked = append(r.Asked, Asked{Channel: "cli", Role: approval.RoleApprover, What: "approve or deny", Who: approvers})
			for _, p := range in.Posts {
				if p.Record != record.ID {
					continue
				}
				a := Asked{Channel: p.Kind, Role: approval.RoleApprover, What: "approve or deny", Who: approvers,
					SlackChannel: p.SlackChannel, SlackThread: p.SlackTS, GitHubRepo: p.GitHubRepo, GitHubIssue: p.GitHubIssue,
					URL: p.URL, Escalation: p.Escalation}
				r.Asked = append(r.Asked, a)
			}
		}
	}
	for _, e := range in.Events {
		if e.Record == r.Record {
			r.Events = append(r.Events, e)
		}
	}
	switch {
	case in.Refusal == nil:
		r.State = RequestApproved
		r.Decision = outcome(in.Evidence, false, in.Now)
	case in.Refusal.Code == refusal.Withdrawn:
		r.State = RequestWithdrawn
	case in.Refusal.Code == refusal.Vetoed:
		r.State = RequestDenied
		r.Decision = outcome(in.Evidence, true, in.Now)
	case !in.Now.Before(r.Expires):
		r.State = RequestExpired
	default:
		r.State = RequestPending
	}
	if in.Refusal != nil && r.State != RequestWithdrawn {
		r.Missing = append(r.Missing, in.Refusal.Missing...)
	}
	return r
}

// currentRecord is the newest authentic certainty record: the one a
// request asks the approvers about (file posts the newest).
func currentRecord(ev []*approval.Assessed) *approval.Assessed {
	var out *approval.Assessed
	for _, a := range ev {
		if a.Kind != approval.KindRecord || a.Signed == nil {
			continue
		}
		if a.Problem != nil && *a.Problem != refusal.EvidenceExpired && *a.Problem != refusal.EvidenceConsumed {
			continue // a record that does not verify asks nobody anything
		}
		if out == nil || a.Issued.After(out.Issued) {
			out = a
		}
	}
	return out
}

// holders lists who holds role, except the planner and the filer.
func holders(p *approval.Policy, role, planner, filer string) []string {
	out := []string{}
	if p == nil {
		return out
	}
	for _, pr := range p.Principals {
		if pr.Has(role) && pr.ID != planner && pr.ID != filer && !slices.Contains(out, pr.ID) {
			out = append(out, pr.ID)
		}
	}
	return out
}

// outcome names the decision that closed the request: when vetoed, the
// newest veto as the gate counts one (authentic and in force, even if
// issued ahead of the clock; else the lapsed veto that still refuses
// everything issued before it expired); else the newest valid approval
// or go.
func outcome(ev []*approval.Assessed, veto bool, now time.Time) *Outcome {
	var best *approval.Assessed
	pick := func(ok func(a *approval.Assessed) bool) {
		for _, a := range ev {
			if ok(a) && (best == nil || a.Issued.After(best.Issued)) {
				best = a
			}
		}
	}
	isVeto := func(a *approval.Assessed) bool {
		return a.Authentic() && (a.Verdict == approval.Deny || a.Verdict == approval.NoGo)
	}
	if veto {
		pick(func(a *approval.Assessed) bool { return isVeto(a) && now.Before(a.Expires) })
		if best == nil {
			pick(isVeto)
		}
	} else {
		pick(func(a *approval.Assessed) bool {
			return a.Valid && (a.Verdict == approval.Approve || a.Verdict == approval.Go)
		})
	}
	if best == nil {
		return nil
	}
	o := &Outcome{Verdict: best.Verdict, By: best.By, Via: "cli", At: best.Issued.UTC()}
	if best.Channel != nil {
		o.Via = best.Channel.Kind
	}
	if best.Signed != nil {
		switch best.Kind {
		case approval.KindAnswer:
			var a approval.Answer
			if best.Signed.Decode(&a) == nil {
				o.Reason = a.Reason
			}
		case approval.KindGera:
			var g approval.GeraDecision
			if best.Signed.Decode(&g) == nil {
				o.Reason = g.Reason
			}
		}
	}
	return o
}

// Sentence is the request's state in one line, for people.
func (r *DecisionRequest) Sentence() string {
	switch r.State {
	case RequestApproved:
		if d := r.Decision; d != nil {
			return fmt.Sprintf("approved: %s by %s (%s)", d.Verdict, d.By, d.Via)
		}
		return "approved"
	case RequestDenied:
		if d := r.Decision; d != nil {
			s := fmt.Sprintf("denied: %s by %s (%s)", d.Verdict, d.By, d.Via)
			if d.Reason != "" {
				s += ", reason: " + visible.Text(d.Reason)
			}
			return s
		}
		return "denied"
	case RequestWithdrawn:
		return "withdrawn by the planner"
	case RequestExpired:
		return "expired at " + stamp(r.Expires) + " with no decision: nothing may run; plan and ask again"
	}
	return "pending until " + stamp(r.Expires)
}
