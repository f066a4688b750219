package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// RoleBreakGlass may let a plan of an operation that allows it run without
// the usual approvals (docs/adr/0028-break-glass.md).
const RoleBreakGlass = "break-glass"

// DSSE payload types of break-glass records.
const (
	TypeBreakGlass       = "application/vnd.prod-write.break-glass+json"
	TypeBreakGlassReview = "application/vnd.prod-write.break-glass-review+json"
)

// Kinds as people read them.
const (
	KindBreakGlass       = "break-glass"
	KindBreakGlassReview = "break-glass-review"
)

// BreakGlass lets one plan run once without its usual approvals: signed by
// a principal with the break-glass role, with a reason and an incident
// reference, expiring within the operation's cap. It is the anchor its run
// consumes.
type BreakGlass struct {
	Fingerprint string    `json:"fingerprint"`
	Breaker     string    `json:"breaker"`
	Reason      string    `json:"reason"`
	Incident    string    `json:"incident"`
	Issued      time.Time `json:"issued"`
	Expires     time.Time `json:"expires"`
}

// BreakGlassReview records that a reviewer (role approver, never the
// breaker) looked at a break-glass run after the fact. Until one exists,
// the breaker cannot break glass again.
type BreakGlassReview struct {
	// Record is the reviewed break-glass record's id.
	Record      string    `json:"record"`
	Fingerprint string    `json:"fingerprint"`
	Breaker     string    `json:"breaker"`
	Reviewer    string    `json:"reviewer"`
	Notes       string    `json:"notes,omitempty"`
	Issued      time.Time `json:"issued"`
}

// BreakGlassHistory is what the gate knows of breakers' earlier break-glass
// runs: the records that ran (the caller decides: run by what the store has
// consumed, replay by the journal) and the reviews of them. Records and
// reviews of principals who break no glass of this plan are ignored.
type BreakGlassHistory struct {
	Ran     []*Envelope
	Reviews []*Envelope
}

// BreakGlassLink is the second anchor a break-glass run consumes: one per
// breaker and count of its earlier runs, so that of two break-glass runs
// racing with the same history only one runs (docs/adr/0028-break-glass.md).
func BreakGlassLink(breaker string, earlier int) string {
	sum := sha256.Sum256([]byte("prod-write break-glass link\x00" + breaker + "\x00" + strconv.Itoa(earlier)))
	return hex.EncodeToString(sum[:])
}

// Breakers returns the principals who signed break-glass records among
// envs (verified, for the plan fp), sorted, so a caller knows whose
// history to read.
func (p *Policy) Breakers(fp string, envs []*Envelope) []string {
	seen := map[string]bool{}
	var out []string
	for _, env := range envs {
		if env == nil || env.PayloadType != TypeBreakGlass {
			continue
		}
		s, err := p.Open(env)
		if err != nil {
			continue
		}
		var b BreakGlass
		if s.Decode(&b) != nil || b.Fingerprint != fp || b.Breaker != s.Signer.ID || seen[b.Breaker] {
			continue
		}
		seen[b.Breaker] = true
		out = append(out, b.Breaker)
	}
	sort.Strings(out)
	return out
}

// breakGlassRule is the break-glass path of the gate, tried only when no
// usual path opens it. It returns nil and no error when no break-glass
// record of the plan is valid.
func breakGlassRule(in Input, plan *operations.Plan, d *Decision) (*Assessed, *refusal.Error) {
	var cand *Assessed
	for _, a := range d.Evidence {
		if a.Kind == KindBreakGlass && a.Valid {
			cand = a
			break
		}
	}
	if cand == nil {
		return nil, nil
	}
	var unreviewed []string
	var reviews []*Signed
	earlier := 0
	seen := map[string]bool{}
	for _, env := range in.BreakGlass.Ran {
		s, err := in.Policy.Open(env)
		if err != nil {
			return nil, refusal.New(refusal.EvidenceUnreadable, "an earlier break-glass run of %s cannot be verified: %v", cand.By, err).Needs("readable break-glass history (prod-write doctor)")
		}
		var b BreakGlass
		if s.Type != TypeBreakGlass || s.Decode(&b) != nil || b.Breaker != s.Signer.ID {
			return nil, refusal.New(refusal.EvidenceUnreadable, "an earlier break-glass run of %s is not a break-glass record", cand.By)
		}
		if b.Breaker != cand.By || s.ID == cand.ID || seen[s.ID] {
			continue
		}
		seen[s.ID] = true
		earlier++
		r := reviewOf(in, s.ID, &b)
		if r == nil {
			unreviewed = append(unreviewed, s.ID)
			continue
		}
		reviews = append(reviews, r)
	}
	if len(unreviewed) > 0 {
		sort.Strings(unreviewed)
		return nil, refusal.New(refusal.BreakGlassUnreviewed, "%s broke glass before (record %.12s…) and no reviewer has reviewed that run yet: a further break-glass waits for the review", cand.By, unreviewed[0]).
			Needs(fmt.Sprintf("a review of break-glass record %s by an approver other than %s (prod-write break-glass review)", unreviewed[0], cand.By))
	}
	d.Path, d.Anchor, d.AnchorUses = operations.PathBreakGlass, cand.ID, 1
	d.Relied = []*Signed{cand.Signed}
	d.BreakGlassReviews = reviews
	d.BreakGlassLink = BreakGlassLink(cand.By, earlier)
	d.Breaker = cand.By
	return cand, nil
}

// reviewOf returns a valid review of the break-glass record id (b) among
// the history's reviews (reviewProblem says what valid is).
func reviewOf(in Input, id string, b *BreakGlass) *Signed {
	for _, env := range in.BreakGlass.Reviews {
		if s, why := reviewProblem(in.Policy, env, id, b, in.Now); why == "" {
			return s
		}
	}
	return nil
}

// reviewProblem says why env is not a valid review of the break-glass
// record id (b) at now, or "" when it is: signed by a principal in force
// with the approver role who is not the breaker, bound to that record,
// issued after it and not in the future.
func reviewProblem(p *Policy, env *Envelope, id string, b *BreakGlass, now time.Time) (*Signed, string) {
	s, err := p.Open(env)
	if err != nil {
		return nil, err.Error()
	}
	var r BreakGlassReview
	switch {
	case s.Type != TypeBreakGlassReview:
		return nil, "it is not a break-glass review"
	case !s.Signer.InForce(now):
		return nil, fmt.Sprintf("its signer %s is not in force at %s", s.Signer.ID, now.UTC().Format(time.RFC3339))
	case s.Decode(&r) != nil:
		return nil, "it does not decode"
	case r.Record != id, r.Breaker != b.Breaker, r.Fingerprint != b.Fingerprint:
		return nil, fmt.Sprintf("it reviews record %.12s… of %s, not record %.12s… of %s", r.Record, r.Breaker, id, b.Breaker)
	case r.Reviewer != s.Signer.ID:
		return nil, fmt.Sprintf("it names reviewer %s but is signed by %s", r.Reviewer, s.Signer.ID)
	case !s.Signer.Has(RoleApprover):
		return nil, fmt.Sprintf("its signer %s does not hold the approver role", s.Signer.ID)
	case r.Reviewer == b.Breaker: // no one reviews their own break-glass
		return nil, fmt.Sprintf("it is signed by the breaker %s: no one reviews their own break-glass", b.Breaker)
	case !r.Issued.After(b.Issued):
		return nil, "it was issued before the record it reviews"
	case r.Issued.After(now.Add(ClockSkew)):
		return nil, "it was issued after " + now.UTC().Format(time.RFC3339)
	}
	return s, ""
}

// assessBreakGlass is assess's part for a break-glass record: the reason,
// the incident and the ttl cap are checked here, since the signer chose
// them. The planner may break glass on its own plan: that is what
// break-glass is; its controls are the notification and the review.
func assessBreakGlass(in Input, s *Signed, a *Assessed) (fingerprint string, issued, expires time.Time, problem string) {
	var b BreakGlass
	if err := s.Decode(&b); err != nil {
		return "", time.Time{}, time.Time{}, err.Error()
	}
	a.By, a.Verdict, a.Path, a.Uses = b.Breaker, "break-glass", operations.PathBreakGlass, 1
	a.Reason, a.Incident = b.Reason, b.Incident
	switch {
	case b.Reason == "" || b.Incident == "":
		return b.Fingerprint, b.Issued, b.Expires, "a break-glass record needs a reason and an incident reference"
	case in.Op != nil && b.Expires.Sub(b.Issued) > in.Op.BreakGlassCap():
		return b.Fingerprint, b.Issued, b.Expires, fmt.Sprintf("its ttl %s exceeds the operation's break-glass cap %s", b.Expires.Sub(b.Issued), in.Op.BreakGlassCap())
	case in.Op != nil && !in.Op.Accepts(operations.PathBreakGlass):
		return b.Fingerprint, b.Issued, b.Expires, fmt.Sprintf("operation %s does not allow break-glass", in.Op.Name)
	}
	return b.Fingerprint, b.Issued, b.Expires, ""
}

// Reviewed reports whether one of reviews is a valid review of the
// break-glass record rec at now, by the gate's own rule (replay and
// receipts list ask it about runs no later break-glass has judged).
func (p *Policy) Reviewed(rec *Envelope, reviews []*Envelope, now time.Time) bool {
	s, err := p.Open(rec)
	if err != nil || s.Type != TypeBreakGlass {
		return false
	}
	var b BreakGlass
	if s.Decode(&b) != nil {
		return false
	}
	return reviewOf(Input{Policy: p, Now: now, BreakGlass: BreakGlassHistory{Reviews: reviews}}, s.ID, &b) != nil
}

// ReviewProblem says why review is not a valid review of the break-glass
// record rec at now, by the gate's own rule, or "" when it is (replay
// judges a review receipt with it).
func (p *Policy) ReviewProblem(rec, review *Envelope, now time.Time) string {
	s, err := p.Open(rec)
	if err != nil || s.Type != TypeBreakGlass {
		return "the record it reviews is not a break-glass record"
	}
	var b BreakGlass
	if s.Decode(&b) != nil {
		return "the record it reviews does not decode"
	}
	_, why := reviewProblem(p, review, s.ID, &b, now)
	return why
}
