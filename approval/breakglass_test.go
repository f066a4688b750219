package approval_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// bgCast: bea may break glass and approve (so her own review is tried),
// ben may plan and break glass (so he breaks glass on his own plan), and
// alice and carol approve. Of the approvers whose keys count only for a
// time, rex's key was revoked a second before the gate's clock and nova's
// counts only from an hour after it; vic's is revoked an hour after it.
var bgCast = []member{
	{ID: "agent", Roles: []string{"agent"}},
	{ID: "bea", Roles: []string{"break-glass", "approver"}},
	{ID: "ben", Roles: []string{"agent", "break-glass"}},
	{ID: "alice", Roles: []string{"approver"}},
	{ID: "carol", Roles: []string{"approver"}},
	{ID: "gera", Roles: []string{"gera"}},
	{ID: "rex", Roles: []string{"approver"}, RevokedAt: testNow.Add(-time.Second)},
	{ID: "nova", Roles: []string{"approver"}, Since: testNow.Add(time.Hour)},
	{ID: "vic", Roles: []string{"approver"}, RevokedAt: testNow.Add(time.Hour)},
}

const breakGlassPath = "break-glass"

func breakGlass(fp, by string) approval.BreakGlass {
	return approval.BreakGlass{Fingerprint: fp, Breaker: by, Reason: "db down", Incident: "INC-7",
		Issued: testNow.Add(-time.Minute), Expires: testNow.Add(10 * time.Minute)}
}

func review(t tb, rec *approval.Envelope, by string) *approval.Envelope {
	t.Helper()
	return reviewWith(t, rec, by, nil)
}

// reviewWith is review signed by by, with edit applied to it first.
func reviewWith(t tb, rec *approval.Envelope, by string, edit func(*approval.BreakGlassReview)) *approval.Envelope {
	t.Helper()
	s, err := mustPolicy(t, bgCast).Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	var b approval.BreakGlass
	if err := s.Decode(&b); err != nil {
		t.Fatal(err)
	}
	r := approval.BreakGlassReview{Record: s.ID, Fingerprint: b.Fingerprint, Breaker: b.Breaker, Reviewer: by, Issued: b.Issued.Add(time.Second)}
	if edit != nil {
		edit(&r)
	}
	return mustSign(t, by, approval.TypeBreakGlassReview, r)
}

func TestBreakGlassGate(t *testing.T) {
	p := mustPolicy(t, bgCast)
	op := mustOp(t, 1, []string{gera, smith, breakGlassPath}, true)
	plan, penv := planFor(t, op, "agent", "")
	fp := plan.Fingerprint
	_, own := planFor(t, op, "ben", "own")
	ownFP := mustPlanFP(t, p, own)
	// An earlier break-glass run of bea, of another plan.
	earlier := mustSign(t, "bea", approval.TypeBreakGlass, breakGlass("sha256:"+strings.Repeat("1", 64), "bea"))
	sign := func(by string, edit func(*approval.BreakGlass)) *approval.Envelope {
		b := breakGlass(fp, by)
		if edit != nil {
			edit(&b)
		}
		return mustSign(t, by, approval.TypeBreakGlass, b)
	}
	ok := sign("bea", nil)
	// reviewed is the history of bea's earlier run with the reviews given.
	reviewed := func(reviews ...*approval.Envelope) approval.BreakGlassHistory {
		return approval.BreakGlassHistory{Ran: []*approval.Envelope{earlier}, Reviews: reviews}
	}
	for _, c := range []struct {
		name     string
		plan     *approval.Envelope
		op       *operations.Operation
		evidence []*approval.Envelope
		history  approval.BreakGlassHistory
		used     map[string]int
		want     refusal.Code // "" allowed on the break-glass path
	}{
		{name: "allowed", evidence: []*approval.Envelope{ok}},
		{name: "the planner breaks glass on its own plan", plan: own, evidence: []*approval.Envelope{mustSign(t, "ben", approval.TypeBreakGlass, breakGlass(ownFP, "ben"))}},
		{name: "no break-glass role", evidence: []*approval.Envelope{sign("alice", nil)}, want: refusal.RoleMissing},
		// The agent role is not the break-glass role (the full mutant run
		// of session 7 found the role checked only against an approver).
		{name: "an agent without the break-glass role", evidence: []*approval.Envelope{sign("agent", nil)}, want: refusal.RoleMissing},
		{name: "no reason", evidence: []*approval.Envelope{sign("bea", func(b *approval.BreakGlass) { b.Reason = "" })}, want: refusal.NoApproval},
		{name: "no incident", evidence: []*approval.Envelope{sign("bea", func(b *approval.BreakGlass) { b.Incident = "" })}, want: refusal.NoApproval},
		{name: "expired", evidence: []*approval.Envelope{sign("bea", func(b *approval.BreakGlass) { b.Expires = testNow })}, want: refusal.EvidenceExpired},
		{name: "ttl over the cap", evidence: []*approval.Envelope{sign("bea", func(b *approval.BreakGlass) { b.Expires = b.Issued.Add(16 * time.Minute) })}, want: refusal.NoApproval},
		{name: "used", evidence: []*approval.Envelope{ok}, used: map[string]int{mustID(t, ok): 1}, want: refusal.EvidenceConsumed},
		{name: "other plan", evidence: []*approval.Envelope{sign("bea", func(b *approval.BreakGlass) { b.Fingerprint = "sha256:" + strings.Repeat("2", 64) })}, want: refusal.NoApproval},
		{name: "a veto wins", evidence: []*approval.Envelope{ok, mustSign(t, "gera", approval.TypeGera, geraNoGo(fp, "gera"))}, want: refusal.Vetoed},
		{name: "earlier run unreviewed", evidence: []*approval.Envelope{ok}, history: approval.BreakGlassHistory{Ran: []*approval.Envelope{earlier}}, want: refusal.BreakGlassUnreviewed},
		{name: "earlier run reviewed by herself", evidence: []*approval.Envelope{ok}, history: approval.BreakGlassHistory{Ran: []*approval.Envelope{earlier}, Reviews: []*approval.Envelope{review(t, earlier, "bea")}}, want: refusal.BreakGlassUnreviewed},
		{name: "earlier run reviewed by a non-approver", evidence: []*approval.Envelope{ok}, history: approval.BreakGlassHistory{Ran: []*approval.Envelope{earlier}, Reviews: []*approval.Envelope{review(t, earlier, "gera")}}, want: refusal.BreakGlassUnreviewed},
		{name: "a review of another run", evidence: []*approval.Envelope{ok}, history: approval.BreakGlassHistory{Ran: []*approval.Envelope{earlier}, Reviews: []*approval.Envelope{review(t, ok, "alice")}}, want: refusal.BreakGlassUnreviewed},
		{name: "earlier run reviewed by an approver", evidence: []*approval.Envelope{ok}, history: approval.BreakGlassHistory{Ran: []*approval.Envelope{earlier}, Reviews: []*approval.Envelope{review(t, earlier, "alice")}}},
		// A review counts only when its signer's key is in force now, it
		// names its signer as the reviewer, and it was issued after the
		// run it reviews and not in the future.
		{name: "earlier run reviewed with a key revoked since", evidence: []*approval.Envelope{ok}, history: reviewed(review(t, earlier, "rex")), want: refusal.BreakGlassUnreviewed},
		{name: "earlier run reviewed with a key not yet valid", evidence: []*approval.Envelope{ok}, history: reviewed(review(t, earlier, "nova")), want: refusal.BreakGlassUnreviewed},
		{name: "earlier run reviewed with a key revoked only later", evidence: []*approval.Envelope{ok}, history: reviewed(review(t, earlier, "vic"))},
		{name: "the breaker's own review under another approver's name", evidence: []*approval.Envelope{ok}, history: reviewed(reviewWith(t, earlier, "bea", func(r *approval.BreakGlassReview) { r.Reviewer = "alice" })), want: refusal.BreakGlassUnreviewed},
		{name: "a review signed by a non-approver under an approver's name", evidence: []*approval.Envelope{ok}, history: reviewed(reviewWith(t, earlier, "gera", func(r *approval.BreakGlassReview) { r.Reviewer = "alice" })), want: refusal.BreakGlassUnreviewed},
		{name: "a review issued before the run it reviews", evidence: []*approval.Envelope{ok}, history: reviewed(reviewWith(t, earlier, "alice", func(r *approval.BreakGlassReview) { r.Issued = r.Issued.Add(-2 * time.Second) })), want: refusal.BreakGlassUnreviewed},
		{name: "a review issued with the run it reviews", evidence: []*approval.Envelope{ok}, history: reviewed(reviewWith(t, earlier, "alice", func(r *approval.BreakGlassReview) { r.Issued = r.Issued.Add(-time.Second) })), want: refusal.BreakGlassUnreviewed},
		{name: "a review issued beyond the clock skew", evidence: []*approval.Envelope{ok}, history: reviewed(reviewWith(t, earlier, "alice", func(r *approval.BreakGlassReview) { r.Issued = testNow.Add(approval.ClockSkew + time.Second) })), want: refusal.BreakGlassUnreviewed},
		{name: "a review issued within the clock skew", evidence: []*approval.Envelope{ok}, history: reviewed(reviewWith(t, earlier, "alice", func(r *approval.BreakGlassReview) { r.Issued = testNow.Add(approval.ClockSkew) }))},
		{name: "another breaker's unreviewed run does not count", evidence: []*approval.Envelope{ok}, history: approval.BreakGlassHistory{Ran: []*approval.Envelope{mustSign(t, "ben", approval.TypeBreakGlass, breakGlass(fp, "ben"))}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := approval.Input{Plan: penv, Evidence: c.evidence, Policy: p, Op: op, Now: testNow, Used: c.used, BreakGlass: c.history}
			if c.plan != nil {
				in.Plan = c.plan
			}
			if c.op != nil {
				in.Op = c.op
			}
			d, err := approval.Evaluate(in)
			if c.want == "" {
				if err != nil || d.Path != breakGlassPath || d.AnchorUses != 1 || d.Anchor != mustID(t, c.evidence[0]) || d.BreakGlassLink == "" {
					t.Fatalf("Evaluate = %+v, %v; want the break-glass path anchored on the record", d, err)
				}
				return
			}
			if r, ok := refusal.As(err); !ok || r.Code != c.want {
				t.Fatalf("Evaluate: %v, want %s", err, c.want)
			}
		})
	}
}

// A usual approval is spent before a break-glass: break-glass is the
// escape when none opens the gate, so nobody is skipped when one does.
func TestBreakGlassAfterUsualPaths(t *testing.T) {
	p := mustPolicy(t, bgCast)
	op := mustOp(t, 1, []string{gera, smith, breakGlassPath}, true)
	plan, penv := planFor(t, op, "agent", "")
	bg := mustSign(t, "bea", approval.TypeBreakGlass, breakGlass(plan.Fingerprint, "bea"))
	g := mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", 1))
	d, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: []*approval.Envelope{bg, g}, Policy: p, Op: op, Now: testNow})
	if err != nil || d.Path != gera {
		t.Fatalf("Evaluate = %v, %v; want the gera path", d.Path, err)
	}
}

func mustPlanFP(t tb, p *approval.Policy, env *approval.Envelope) string {
	t.Helper()
	plan, _, err := p.DecodePlan(env)
	if err != nil {
		t.Fatal(err)
	}
	return plan.Fingerprint
}

// TestBreakGlassNeverTwice is the property of break-glass
// (docs/adr/0028-break-glass.md): whatever records are signed, reviews
// recorded and runs attempted, in any interleaving of gate decisions and
// consumptions (two runs may both pass the gate before either consumes), a
// break-glass record runs at most once, and a breaker never has two runs
// that no approver other than the breaker reviewed. Consumption is the
// store's rule: each anchor and each link once.
func TestBreakGlassNeverTwice(t *testing.T) {
	p := mustPolicy(t, bgCast)
	op := mustOp(t, 1, []string{gera, smith, breakGlassPath}, true)
	var plans []*approval.Envelope
	var fps []string
	for i := range 3 {
		plan, env := planFor(t, op, "agent", fmt.Sprint(i))
		plans, fps = append(plans, env), append(fps, plan.Fingerprint)
	}
	breakers := []string{"bea", "ben"}
	rapid.Check(t, func(t *rapid.T) {
		type rec struct {
			env     *approval.Envelope
			id, by  string
			plan    int
			decided *approval.Decision // passed the gate, not yet consumed
		}
		var recs []*rec
		var reviews []*approval.Envelope
		consumed := map[string]bool{} // anchors and links
		ran := map[string]int{}       // record id → runs
		history := func(by string) approval.BreakGlassHistory {
			h := approval.BreakGlassHistory{Reviews: reviews}
			for _, r := range recs {
				if r.by == by && consumed[r.id] {
					h.Ran = append(h.Ran, r.env)
				}
			}
			return h
		}
		for step := range rapid.IntRange(1, 30).Draw(t, "steps") {
			l := fmt.Sprintf("s%d", step)
			switch rapid.IntRange(0, 3).Draw(t, l) {
			case 0: // sign a break-glass record
				by := rapid.SampledFrom(breakers).Draw(t, l+".by")
				k := rapid.IntRange(0, len(plans)-1).Draw(t, l+".plan")
				b := breakGlass(fps[k], by)
				b.Issued = b.Issued.Add(time.Duration(step) * time.Millisecond)
				env := mustSign(t, by, approval.TypeBreakGlass, b)
				recs = append(recs, &rec{env: env, id: mustID(t, env), by: by, plan: k})
			case 1: // review a record (whether or not it ran)
				if len(recs) == 0 {
					continue
				}
				r := rapid.SampledFrom(recs).Draw(t, l+".rec")
				reviews = append(reviews, review(t, r.env, rapid.SampledFrom([]string{"alice", "bea", "ben", "gera"}).Draw(t, l+".reviewer")))
			case 2: // a run passes (or not) the gate
				if len(recs) == 0 {
					continue
				}
				r := rapid.SampledFrom(recs).Draw(t, l+".rec")
				used := map[string]int{}
				for id := range consumed {
					used[id] = 1
				}
				d, err := approval.Evaluate(approval.Input{Plan: plans[r.plan], Evidence: []*approval.Envelope{r.env}, Policy: p, Op: op, Now: testNow, Used: used, BreakGlass: history(r.by)})
				if err == nil {
					r.decided = d
				}
			case 3: // a run that passed consumes, as run does: the record, then the link
				var pending []*rec
				for _, r := range recs {
					if r.decided != nil {
						pending = append(pending, r)
					}
				}
				if len(pending) == 0 {
					continue
				}
				r := rapid.SampledFrom(pending).Draw(t, l+".run")
				d := r.decided
				r.decided = nil
				if consumed[d.Anchor] {
					continue
				}
				consumed[d.Anchor] = true
				if consumed[d.BreakGlassLink] {
					continue
				}
				consumed[d.BreakGlassLink] = true
				ran[r.id]++
			}
			for id, n := range ran {
				if n > 1 {
					t.Fatalf("break-glass record %.12s ran %d times", id, n)
				}
			}
			for _, by := range breakers {
				unreviewed := 0
				for _, r := range recs {
					if r.by != by || ran[r.id] == 0 {
						continue
					}
					reviewed := false
					for _, rv := range reviews {
						s, _ := p.Open(rv)
						var x approval.BreakGlassReview
						_ = s.Decode(&x)
						reviewed = reviewed || (x.Record == r.id && x.Reviewer != by && s.Signer.Has(approval.RoleApprover))
					}
					if !reviewed {
						unreviewed++
					}
				}
				if unreviewed > 1 {
					t.Fatalf("%s has %d unreviewed break-glass runs", by, unreviewed)
				}
			}
		}
	})
}
