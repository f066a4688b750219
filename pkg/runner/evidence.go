package runner

import (
	"fmt"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
)

// The evidence a principal adds to a stored plan (file, decide, gera,
// withdraw, freeze grant, break-glass): each is judged and built here, from
// the plan context, the acting key and its principal (already found in the
// policy, with its role), and the clock, then signed with that key and
// stored. Loading the key and telling anyone are the caller's.

// Acts refuses pr acting in role on a plan it planned (docs/DESIGN.md §3 rule 6),
// unless the act is a veto, which anyone holding the role may cast, the
// planner included: a veto only reduces what may run.
func (pc *PlanContext) Acts(pr *approval.Principal, role string, veto bool) error {
	if pr.ID == pc.Plan.Planner && !veto {
		return pc.Refuse(refusal.SelfApproval, "%s planned this; no principal acts on its own plan except to withdraw it", pr.ID).Needs("another " + role)
	}
	return nil
}

// Put signs v as a record of payloadType with k and stores it as evidence
// for pc's plan, returning its id.
func (pc *PlanContext) Put(k *keys.Private, payloadType string, v any) (string, error) {
	env, err := approval.Sign(k, payloadType, v)
	if err != nil {
		return "", err
	}
	id, err := approval.ID(env)
	if err != nil {
		return "", err
	}
	if err := pc.Store.PutEvidence(pc.Plan.Fingerprint, id, env); err != nil {
		return "", fmt.Errorf("storing record: %w", err)
	}
	return id, nil
}

// Expiry returns now+ttl, with ttl defaulting to the operation's.
func (pc *PlanContext) Expiry(now time.Time, ttl time.Duration) time.Time {
	if ttl <= 0 {
		ttl = pc.Op.ApprovalTTL()
	}
	return now.Add(ttl)
}

// File stores pr's certainty record for pc's plan: what the operator
// wrote (summary, effect, blast radius, rollback, certainty), bound to the
// plan, to pr and to now, for ttl. It returns the record's id and the
// record as signed.
func (pc *PlanContext) File(k *keys.Private, pr *approval.Principal, rec approval.CertaintyRecord, now time.Time, ttl time.Duration) (string, *approval.CertaintyRecord, error) {
	rec.Fingerprint, rec.Filer, rec.Issued, rec.Expires = pc.Plan.Fingerprint, pr.ID, now, pc.Expiry(now, ttl)
	id, err := pc.Put(k, approval.TypeSmith, rec)
	if err != nil {
		return "", nil, err
	}
	return id, &rec, nil
}

// Decide stores pr's answer (approve or deny) to the certainty record
// record (the newest valid one when ""). An approval needs a valid record
// that pr did not file; a deny needs none. It returns the answer's id, the
// answer as signed, and the record answered with its id (nil, "" for a
// deny with none).
func (pc *PlanContext) Decide(k *keys.Private, pr *approval.Principal, answer, reason, record string, now time.Time, ttl time.Duration) (string, *approval.Answer, *approval.CertaintyRecord, error) {
	rec, recID, err := pc.CertaintyRecord(record, now)
	if err != nil {
		return "", nil, nil, err
	}
	if rec == nil && answer == approval.Approve {
		return "", nil, nil, pc.Refuse(refusal.NoApproval, "there is no valid certainty record to approve").Needs("an operator's certainty record (prod-write file)")
	}
	if rec != nil && rec.Filer == pr.ID && answer == approval.Approve {
		return "", nil, nil, pc.Refuse(refusal.SelfApproval, "%s filed the certainty record and cannot also answer it", pr.ID).Needs("another approver")
	}
	ans := approval.Answer{
		Fingerprint: pc.Plan.Fingerprint, Record: recID, Answer: answer, Reason: reason,
		Approver: pr.ID, Issued: now, Expires: pc.Expiry(now, ttl),
	}
	id, err := pc.Put(k, approval.TypeTrinity, ans)
	if err != nil {
		return "", nil, nil, err
	}
	return id, &ans, rec, nil
}

// CertaintyRecord finds the certainty record an answer answers: the one
// named, or the newest that verifies and has not expired (nil, "" when
// there is none).
func (pc *PlanContext) CertaintyRecord(want string, now time.Time) (*approval.CertaintyRecord, string, error) {
	evidence, _, err := pc.Store.Evidence(pc.Plan.Fingerprint)
	if err != nil {
		return nil, "", err
	}
	var best *approval.CertaintyRecord
	bestID := ""
	for _, env := range evidence {
		s, err := pc.Policy.Open(env)
		if err != nil || s.Type != approval.TypeSmith || !s.Signer.Has(approval.RoleOperator) {
			continue
		}
		var c approval.CertaintyRecord
		if s.Decode(&c) != nil || c.Fingerprint != pc.Plan.Fingerprint || c.Filer != s.Signer.ID {
			continue
		}
		if want != "" {
			if s.ID == want {
				return &c, s.ID, nil
			}
			continue
		}
		if now.Before(c.Expires) && (best == nil || c.Issued.After(best.Issued)) {
			best, bestID = &c, s.ID
		}
	}
	if want != "" {
		return nil, "", pc.Refuse(refusal.NoApproval, "no certainty record %s for this plan", want)
	}
	return best, bestID, nil
}

// Gera stores pr's standing go or no-go for pc's plan: a go for uses runs,
// a no-go (a veto) for none.
func (pc *PlanContext) Gera(k *keys.Private, pr *approval.Principal, decision string, uses int, reason string, now time.Time, ttl time.Duration) (string, *approval.GeraDecision, error) {
	if decision == approval.NoGo {
		uses = 0
	}
	g := approval.GeraDecision{Fingerprint: pc.Plan.Fingerprint, Decision: decision, Uses: uses, Decider: pr.ID,
		Reason: reason, Issued: now, Expires: pc.Expiry(now, ttl)}
	id, err := pc.Put(k, approval.TypeGera, g)
	if err != nil {
		return "", nil, err
	}
	return id, &g, nil
}

// Withdraw stores the planner's withdrawal of its own plan, for good.
// Anyone else is refused.
func (pc *PlanContext) Withdraw(k *keys.Private, pr *approval.Principal, now time.Time) (string, *approval.Withdrawal, error) {
	if pr.ID != pc.Plan.Planner {
		return "", nil, pc.Refuse(refusal.RoleMissing, "only the planner (%s) may withdraw this plan, not %s", pc.Plan.Planner, pr.ID).Needs("the planner's key")
	}
	w := approval.Withdrawal{Fingerprint: pc.Plan.Fingerprint, Planner: pr.ID, Issued: now}
	id, err := pc.Put(k, approval.TypeWithdraw, w)
	if err != nil {
		return "", nil, err
	}
	return id, &w, nil
}

// HasFreeze refuses a freeze the trust policy does not name.
func (pc *PlanContext) HasFreeze(name string) error {
	if len(pc.Policy.FreezeByName(name)) == 0 {
		return pc.Refuse(refusal.NoApproval, "the trust policy has no freeze %q", name).Needs("a freeze of that name (prod-write freeze list)")
	}
	return nil
}

// GrantFreeze stores pr's grant of pc's plan through the freeze named, for
// ttl (default: the operation's approval ttl).
func (pc *PlanContext) GrantFreeze(k *keys.Private, pr *approval.Principal, freeze, reason string, now time.Time, ttl time.Duration) (string, *approval.FreezeGrant, error) {
	g := approval.FreezeGrant{Fingerprint: pc.Plan.Fingerprint, Freeze: freeze, Granter: pr.ID, Reason: reason, Issued: now, Expires: pc.Expiry(now, ttl)}
	id, err := pc.Put(k, approval.TypeFreezeGrant, g)
	if err != nil {
		return "", nil, err
	}
	return id, &g, nil
}

// AllowsBreakGlass refuses a plan whose operation does not accept the
// break-glass path.
func (pc *PlanContext) AllowsBreakGlass() error {
	if !pc.Op.Accepts(operations.PathBreakGlass) {
		return pc.Refuse(refusal.NoApproval, "operation %s does not allow break-glass", pc.Op.Name).Needs("approval.paths with break-glass in the operation's definition")
	}
	return nil
}

// BreakGlass stores pr's break-glass record for pc's plan, for ttl (default
// 15m, at most the operation's cap), in pr's index and as evidence. It
// refuses what the gate would refuse at run, an earlier break-glass run of
// pr's that nobody has reviewed, and then stores nothing
// (docs/adr/0028-break-glass.md).
func (pc *PlanContext) BreakGlass(k *keys.Private, pr *approval.Principal, reason, incident string, now time.Time, ttl time.Duration) (string, *approval.BreakGlass, error) {
	if ttl <= 0 {
		ttl = min(operations.DefaultBreakGlassTTL, pc.Op.BreakGlassCap())
	}
	if ttl > pc.Op.BreakGlassCap() {
		return "", nil, pc.Refuse(refusal.NoApproval, "--ttl %s exceeds operation %s's break-glass cap %s", ttl, pc.Op.Name, pc.Op.BreakGlassCap()).Needs(fmt.Sprintf("--ttl of at most %s", pc.Op.BreakGlassCap()))
	}
	b := approval.BreakGlass{Fingerprint: pc.Plan.Fingerprint, Breaker: pr.ID, Reason: reason, Incident: incident, Issued: now, Expires: now.Add(ttl)}
	env, err := approval.Sign(k, approval.TypeBreakGlass, b)
	if err != nil {
		return "", nil, err
	}
	id, err := approval.ID(env)
	if err != nil {
		return "", nil, err
	}
	hist, problems, err := BreakGlassHistory(pc.Store, pc.Policy, pc.Plan.Fingerprint, []*approval.Envelope{env})
	if err != nil {
		return "", nil, err
	}
	if len(problems) == 0 {
		_, gerr := approval.Evaluate(approval.Input{Plan: pc.Envelope, Evidence: []*approval.Envelope{env}, Policy: pc.Policy, Op: pc.Op, Now: now, BreakGlass: hist, PreconditionUnchecked: true})
		if r, ok := refusal.As(gerr); ok && r.Code == refusal.BreakGlassUnreviewed {
			return "", nil, r
		}
	}
	// The breaker's index first: a record stored as evidence but missing
	// from it could run while the history the gate counts lacks it.
	if err := store.PutBreakGlass(pc.Store, pr.ID, id, env); err != nil {
		return "", nil, fmt.Errorf("storing record under %s: %w", pr.ID, err)
	}
	if err := pc.Store.PutEvidence(pc.Plan.Fingerprint, id, env); err != nil {
		return "", nil, fmt.Errorf("storing record: %w", err)
	}
	return id, &b, nil
}
