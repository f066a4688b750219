package runner

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// BreakGlassHistory reads, for each principal who signed a break-glass
// record among evidence, its break-glass records that ran (consumed in the
// store) and the reviews stored for it. Items that cannot be read are
// returned as problems: the caller refuses (they may be a run that counts).
func BreakGlassHistory(s store.Store, p *approval.Policy, fp string, evidence []*approval.Envelope) (approval.BreakGlassHistory, []string, error) {
	var h approval.BreakGlassHistory
	var problems []string
	for _, who := range p.Breakers(fp, evidence) {
		envs, probs, err := store.BreakGlass(s, who)
		if err != nil {
			return h, nil, fmt.Errorf("reading %s's break-glass records: %w", who, err)
		}
		problems = append(problems, ProblemStrings(probs)...)
		var ids []string
		byID := map[string]*approval.Envelope{}
		for _, env := range envs {
			switch env.PayloadType {
			case approval.TypeBreakGlassReview:
				h.Reviews = append(h.Reviews, env)
			case approval.TypeBreakGlass:
				if id, err := approval.ID(env); err == nil {
					ids = append(ids, id)
					byID[id] = env
				}
			}
		}
		used, err := s.Used(ids)
		if err != nil {
			return h, nil, fmt.Errorf("reading %s's break-glass runs: %w", who, err)
		}
		slices.Sort(ids)
		for _, id := range ids {
			if used[id] > 0 {
				h.Ran = append(h.Ran, byID[id])
			}
		}
	}
	return h, problems, nil
}

// consumeBreakGlassLink spends the second anchor of a break-glass run:
// one per breaker and count of earlier runs, so of two runs that passed
// the gate on the same history only one runs (ADR 0028).
func consumeBreakGlassLink(pc *PlanContext, dec *approval.Decision, runID string) error {
	_, err := pc.Store.Consume(dec.BreakGlassLink, 1, runID)
	if errors.Is(err, store.ErrConsumed) {
		return pc.Refuse(refusal.BreakGlassUnreviewed, "another break-glass run of %s started on the same history: its review comes first", dec.Breaker).Needs("a review of " + dec.Breaker + "'s last break-glass run")
	}
	if err != nil {
		return fmt.Errorf("consuming the break-glass link: %w", err)
	}
	return nil
}

// breakGlassSeen is what the intent keeps of the history the gate judged.
func breakGlassSeen(dec *approval.Decision, hist approval.BreakGlassHistory, p *approval.Policy) *receipts.BreakGlassSeen {
	seen := &receipts.BreakGlassSeen{Breaker: dec.Breaker, Ran: []*approval.Envelope{}, Reviews: []*approval.Envelope{}}
	for _, env := range hist.Ran {
		if s, err := p.Open(env); err == nil && s.ID != dec.Anchor && s.Signer.ID == dec.Breaker {
			seen.Ran = append(seen.Ran, env)
		}
	}
	for _, s := range dec.BreakGlassReviews {
		seen.Reviews = append(seen.Reviews, s.Env)
	}
	return seen
}

// ProblemStrings names the records the store could not read, for the
// gate, which refuses while there is any (evidence_unreadable).
func ProblemStrings(problems []store.Problem) []string {
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = p.String()
	}
	return out
}
