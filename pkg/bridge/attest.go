package bridge

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
)

// Attestor signs the answers a bridge authenticated, with the bridge's key.
type Attestor struct {
	Source
	key  *keys.Private
	self *approval.Principal
	now  func() time.Time
	// mu serialises look-up-then-sign, so two deliveries of one click in
	// this process cannot both miss each other.
	mu sync.Mutex
	// Admit, when set, admits what the attestor signed elsewhere: the
	// runner service's AnswerAttested, which checks it all again against
	// its own store and clock before it stores it. Unset, [Source.Admit]
	// does, here.
	Admit func(Request, *approval.Envelope) (*Result, error)
}

// NewAttestor returns an attestor signing with key, whose principal must
// hold the bridge role. now is the clock expiry is judged by.
func NewAttestor(src Source, key *keys.Private, now func() time.Time) (*Attestor, error) {
	pr, ok := src.Policy.ByKey(key.Public().ID())
	if !ok {
		return nil, refusal.New(refusal.PrincipalUnknown, "the bridge key belongs to no principal of the trust policy").Needs("a principal with the bridge's key and role bridge in trust.toml")
	}
	if !pr.Has(approval.RoleBridge) {
		return nil, refusal.New(refusal.RoleMissing, "%s, whose key the bridge holds, lacks the bridge role", pr.ID).Needs("role bridge")
	}
	return &Attestor{Source: src, key: key, self: pr, now: now}, nil
}

// Now is the attestor's clock.
func (a *Attestor) Now() time.Time { return a.now().UTC() }

// Principal is the bridge's own principal.
func (a *Attestor) Principal() *approval.Principal { return a.self }

// markDomain separates the bridge's marks from everything else its key
// signs (DSSE envelopes sign "DSSEv1 …", never this prefix).
const markDomain = "prod-write bridge mark v1\x00"

// Mark signs what with the bridge's key, for a mark that only this bridge
// can leave where anyone may write (a refusal reply among a pull request's
// comments). The signature is base64url, without padding or spaces.
func (a *Attestor) Mark(what string) string {
	sig, err := a.key.Sign(context.Background(), []byte(markDomain+what))
	if err != nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(sig)
}

// Marked reports whether sig is the bridge's [Attestor.Mark] of what.
func (a *Attestor) Marked(what, sig string) bool {
	b, err := base64.RawURLEncoding.DecodeString(sig)
	return err == nil && keys.Verify(a.key.Public(), []byte(markDomain+what), b)
}

// Request is an answer a bridge authenticated: who (Channel), what
// (Verdict on Record of Fingerprint) and when (Issued, the channel's own
// timestamp of the click or comment).
type Request struct {
	Fingerprint string
	Record      string
	Verdict     string
	Reason      string
	Channel     approval.Channel
	Issued      time.Time
}

// Result is a stored (or already stored) answer.
type Result struct {
	ID       string
	Approver string
	Verdict  string
	// Duplicate is true when this click or comment had already been
	// recorded: nothing new was stored.
	Duplicate bool
	// View is the decision after the answer.
	View *View
}

// Answer checks req the way the gate will and, if it would count, signs it
// with the bridge key and has it admitted: by [Source.Admit] here, or by
// the runner service's AnswerAttested when the attestor's Admit is set
// (docs/adr/0045-bridges-and-doctor-as-api-clients.md), which checks it
// all again before it stores it. It returns a *refusal.Error when it
// would not count: plan_absent, withdrawn, principal_unknown for a channel
// identity that maps to no principal, role_missing for one that is not an
// approver, self_approval for the planner or the filer of the record,
// no_approval for a record that is not stored or does not verify,
// evidence_expired for a record that no longer counts or an action older
// than an answer lives. Answers to a vetoed plan are still recorded: they
// change nothing, and refusing them would hide who answered what.
//
// A click or comment a bridge already signed an answer for (the same
// channel evidence) is that answer, a Duplicate, before anything else is
// judged: read again after a restart, it may be older than an answer lives
// by now, and refusing it would say that what was recorded was not.
func (a *Attestor) Answer(req Request) (*Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now().UTC()
	src := a.Source.Now()
	c, err := src.check(req, now)
	if err != nil {
		return nil, err
	}
	if c.dup != nil {
		return c.dup, nil
	}
	env, err := approval.Sign(a.key, approval.TypeTrinity, c.answer)
	if err != nil {
		return nil, fmt.Errorf("signing answer: %w", err)
	}
	if a.Admit == nil {
		return src.Admit(req, env, now)
	}
	r, err := a.Admit(req, env)
	if err != nil {
		return nil, err
	}
	// The service's view is the service's; the bridge shows its own.
	if r.View, err = Describe(src, req.Fingerprint, req.Record, now); err != nil {
		r.View = c.view
	}
	return r, nil
}

// checked is what [Source.check] found of a request: the answer to sign,
// or the one already stored for it.
type checked struct {
	view   *View
	answer approval.Answer
	dup    *Result
}

// check judges req as the gate will judge the answer it makes, at now:
// [Attestor.Answer]'s refusals, or the answer a bridge would sign (the
// approver derived from the channel evidence by the policy, the answer
// living [approval.DefaultAnswerTTL] from the action), or a Duplicate.
func (s Source) check(req Request, now time.Time) (*checked, error) {
	if req.Verdict != approval.Approve && req.Verdict != approval.Deny {
		return nil, refusal.New(refusal.SignatureInvalid, "answer %q is neither approve nor deny", req.Verdict).For("", req.Fingerprint)
	}
	if err := store.CheckFingerprint(req.Fingerprint); err != nil {
		return nil, refusal.New(refusal.PlanAbsent, "%v", err)
	}
	v, err := Describe(s, req.Fingerprint, req.Record, now)
	if err != nil {
		return nil, err
	}
	// This click or comment read again (a restarted bridge's first poll,
	// a redelivery) is the answer already signed for it, whatever has
	// happened since: the action may now be older than an answer lives,
	// the plan withdrawn, the policy changed. Judging it again would tell
	// its author that what was recorded was not; whether the answer still
	// counts is the gate's to say, and the view says it.
	if prev := s.sameClick(v, req); prev != nil {
		return &checked{view: v, dup: &Result{ID: prev.ID, Approver: prev.By, Verdict: prev.Verdict, Duplicate: true, View: v}}, nil
	}
	refuse := func(code refusal.Code, format string, args ...any) *refusal.Error {
		return refusal.New(code, format, args...).For(v.Plan.Operation, v.Plan.Fingerprint)
	}
	if v.Withdrawn {
		return nil, refuse(refusal.Withdrawn, "%s", v.GateWhy)
	}
	pr, r := s.approver(req.Channel)
	if r != nil {
		return nil, r.For(v.Plan.Operation, v.Plan.Fingerprint)
	}
	// A deny is a veto, which anyone holding the role may cast, the
	// planner and the filer included; nobody approves their own plan or
	// record (docs/DESIGN.md §3).
	veto := req.Verdict == approval.Deny
	if pr.ID == v.Plan.Planner && !veto {
		return nil, refuse(refusal.SelfApproval, "%s planned this and cannot also approve it", pr.ID)
	}
	if v.Record == nil {
		return nil, refuse(refusal.NoApproval, "no certainty record %.12s… of this plan verifies", req.Record)
	}
	if v.Record.Filer == pr.ID && !veto {
		return nil, refuse(refusal.SelfApproval, "%s filed the certainty record and cannot also approve it", pr.ID)
	}
	if v.RecordProblem != "" {
		return nil, refuse(refusal.EvidenceExpired, "the certainty record no longer counts: %s", v.RecordProblem)
	}
	issued := req.Issued.UTC()
	expires := issued.Add(approval.DefaultAnswerTTL)
	if issued.After(now.Add(approval.ClockSkew)) {
		return nil, refuse(refusal.EvidenceExpired, "the %s action is dated %s, in the future", req.Channel.Kind, issued.Format(time.RFC3339))
	}
	if !now.Before(expires) {
		return nil, refuse(refusal.EvidenceExpired, "the %s action of %s is older than an answer lives (%s)", req.Channel.Kind, issued.Format(time.RFC3339), approval.DefaultAnswerTTL)
	}
	if prev := s.repeated(v, req, pr.ID); prev != nil {
		return &checked{view: v, dup: &Result{ID: prev.ID, Approver: prev.By, Verdict: prev.Verdict, Duplicate: true, View: v}}, nil
	}
	ch := req.Channel
	return &checked{view: v, answer: approval.Answer{
		Fingerprint: req.Fingerprint, Record: req.Record, Answer: req.Verdict, Reason: req.Reason,
		Approver: pr.ID, Channel: &ch, Issued: issued, Expires: expires,
	}}, nil
}

// admitMu serialises Admit's look-up-then-store in this process, so two
// deliveries of one click cannot both miss each other.
var admitMu sync.Mutex

// Admit stores env, an answer a bridge signed for req, when it is exactly
// the answer the checks of [Attestor.Answer], run here at now against this
// source, would have the bridge sign: env verifies under a key of the
// policy whose principal holds role bridge; req passes every check; and
// the answer signed is, field for field, the one derived from req, its
// approver mapped from the channel evidence by this policy and its expiry
// the one an answer lives. So whoever holds a bridge key still cannot
// store an answer the gate would refuse, nor one for an approver the
// evidence does not name. A click already recorded is that answer, a
// Duplicate, and nothing is stored.
func (s Source) Admit(req Request, env *approval.Envelope, now time.Time) (*Result, error) {
	signed, err := s.Policy.Open(env)
	if err != nil {
		return nil, err
	}
	if !signed.Signer.Has(approval.RoleBridge) {
		return nil, refusal.New(refusal.RoleMissing, "the answer is signed by %s, who does not hold the bridge role", signed.Signer.ID).Needs("an answer signed with a bridge's key").For("", req.Fingerprint)
	}
	if signed.Type != approval.TypeTrinity {
		return nil, refusal.New(refusal.SignatureInvalid, "the envelope is a %s, not an answer", signed.Type).For("", req.Fingerprint)
	}
	var got approval.Answer
	if err := signed.Decode(&got); err != nil {
		return nil, refusal.New(refusal.SignatureInvalid, "the answer does not decode: %v", err).For("", req.Fingerprint)
	}
	admitMu.Lock()
	defer admitMu.Unlock()
	c, err := s.check(req, now)
	if err != nil {
		return nil, err
	}
	if c.dup != nil {
		return c.dup, nil
	}
	if field := differs(got, c.answer); field != "" {
		return nil, refusal.New(refusal.SignatureInvalid, "the answer signed is not the one the channel evidence makes: its %s differs", field).For(c.view.Plan.Operation, req.Fingerprint)
	}
	if err := s.put(req.Fingerprint, signed.ID, env); err != nil {
		return nil, fmt.Errorf("storing answer: %w", err)
	}
	after, err := Describe(s, req.Fingerprint, req.Record, now)
	if err != nil {
		after = c.view
	}
	return &Result{ID: signed.ID, Approver: c.answer.Approver, Verdict: req.Verdict, View: after}, nil
}

// differs names the first field in which got is not want, or "".
func differs(got, want approval.Answer) string {
	switch {
	case got.Fingerprint != want.Fingerprint:
		return "fingerprint"
	case got.Record != want.Record:
		return "record"
	case got.Answer != want.Answer:
		return "answer"
	case got.Reason != want.Reason:
		return "reason"
	case got.Approver != want.Approver:
		return "approver"
	case got.Channel == nil || *got.Channel != *want.Channel:
		return "channel"
	case !got.Issued.Equal(want.Issued):
		return "issued"
	case !got.Expires.Equal(want.Expires):
		return "expires"
	}
	return ""
}

// put stores env. The same click delivered to two bridge processes at once
// signs the same bytes under the same id; the embedded store creates the
// file before it writes it, so the second writer can see it empty and report
// ErrExists. It is retried briefly: once the first write lands, the bytes
// are equal and PutEvidence succeeds.
func (s Source) put(fp, id string, env *approval.Envelope) error {
	var err error
	for i := 0; i < 20; i++ {
		if err = s.Store.PutEvidence(fp, id, env); !errors.Is(err, store.ErrExists) {
			return err
		}
		time.Sleep(time.Duration(i+1) * 5 * time.Millisecond)
	}
	return err
}

// approver maps a channel identity to its one principal, which must be an
// approver.
func (s Source) approver(ch approval.Channel) (*approval.Principal, *refusal.Error) {
	var pr *approval.Principal
	var ok bool
	var who string
	switch ch.Kind {
	case KindSlack:
		who = "Slack user " + ch.SlackUser
		if ch.SlackUser != "" {
			pr, ok = s.Policy.BySlack(ch.SlackUser)
		}
	case KindGitHub:
		who = fmt.Sprintf("GitHub login %s (user id %d)", ch.GitHubLogin, ch.GitHubUserID)
		var r *refusal.Error
		if pr, r = s.Policy.ByGitHubAccount(ch.GitHubLogin, ch.GitHubUserID); r != nil {
			return nil, r
		}
		ok = pr != nil
	default:
		return nil, refusal.New(refusal.PrincipalUnknown, "unknown channel kind %q", ch.Kind)
	}
	if !ok {
		return nil, refusal.New(refusal.PrincipalUnknown, "%s maps to no principal of the trust policy", who).Needs("a principal with this identity in trust.toml")
	}
	if !pr.Has(approval.RoleApprover) {
		return nil, refusal.New(refusal.RoleMissing, "%s is %s, who does not hold the approver role", who, pr.ID).Needs("role approver")
	}
	return pr, nil
}

// sameClick returns a bridge answer already stored for this click or
// comment (same channel evidence), valid or not.
func (s Source) sameClick(v *View, req Request) *AnswerView {
	for i := range v.Answers {
		prev := &v.Answers[i]
		if prev.Channel != nil && sameEvidence(*prev.Channel, req.Channel) && s.signedByBridge(v, prev.ID) {
			return prev
		}
	}
	return nil
}

// repeated returns the same approver's same verdict on the same record,
// still valid, which a second click would only repeat. (Unlike
// [Source.sameClick], it is looked for only once this click would count
// on its own: a new click too old to count is refused, not "already
// recorded".)
func (s Source) repeated(v *View, req Request, approver string) *AnswerView {
	for i := range v.Answers {
		prev := &v.Answers[i]
		if prev.Valid && prev.By == approver && prev.Record == req.Record && prev.Verdict == req.Verdict {
			return prev
		}
	}
	return nil
}

// signedByBridge reports whether answer id was signed by a principal
// holding the bridge role: only such a record may stand for a click, or an
// approver could pre-empt a click by storing a look-alike it signed itself.
func (s Source) signedByBridge(v *View, id string) bool {
	in, err := s.read(v.Plan.Fingerprint)
	if err != nil {
		return false
	}
	for _, env := range in.Evidence {
		sg, err := s.Policy.Open(env)
		if err == nil && sg.ID == id {
			return sg.Signer.Has(approval.RoleBridge)
		}
	}
	return false
}

// sameEvidence reports whether two channel records describe the same click
// or comment.
func sameEvidence(x, y approval.Channel) bool {
	if x.Kind != y.Kind {
		return false
	}
	switch x.Kind {
	case KindSlack:
		return x.SlackActionTS != "" && x.SlackActionTS == y.SlackActionTS && x.SlackUser == y.SlackUser && x.SlackTeam == y.SlackTeam
	case KindGitHub:
		// A comment and a review are told apart: their ids are drawn
		// from different sequences.
		same := (x.GitHubComment != 0 && x.GitHubComment == y.GitHubComment && x.GitHubReview == y.GitHubReview) ||
			(x.GitHubReview != 0 && x.GitHubReview == y.GitHubReview && x.GitHubComment == y.GitHubComment)
		return same && strings.EqualFold(x.GitHubRepo, y.GitHubRepo)
	}
	return false
}
