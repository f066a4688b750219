package receipts

import (
	"errors"
	"io"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// breakGlassEntry notes a break-glass run the gate let through: what it
// relied on and what it knew of the breaker's earlier runs, for the
// in-order stage (docs/adr/0028-break-glass.md).
func (rp *Replayer) breakGlassEntry(e *entry, in *Intent, dec *approval.Decision) {
	bg := &bgEntry{line: e.line.No, id: dec.Anchor, seen: map[string]bool{}}
	if len(dec.Relied) > 0 {
		bg.record = dec.Relied[0].Env
		var b approval.BreakGlass
		if dec.Relied[0].Decode(&b) == nil {
			bg.report = Result{Kind: "break-glass", Seq: e.receipt.Seq, RunID: e.receipt.RunID, Time: e.receipt.Time, Fingerprint: in.Fingerprint,
				Operation: dec.Plan.Operation, Runner: e.receipt.Runner, Problems: []Problem{},
				BreakGlass: &BreakGlassRun{Breaker: b.Breaker, Incident: b.Incident, Reason: b.Reason, Record: dec.Anchor}}
		}
	}
	if in.BreakGlass == nil || in.BreakGlass.Breaker != dec.Breaker {
		e.res.add(GateNotSatisfied, "a break-glass intent must say what the gate knew of %s's earlier break-glass runs", dec.Breaker)
		return
	}
	for _, env := range in.BreakGlass.Ran {
		if id, err := approval.ID(env); err == nil {
			bg.seen[id] = true
		}
	}
	for _, s := range dec.BreakGlassReviews {
		var r approval.BreakGlassReview
		if s.Decode(&r) == nil {
			bg.carried = append(bg.carried, carriedReview{record: r.Record, env: s.Env})
		}
	}
	e.bg = bg
}

// checkBreakGlass is the in-order half of the rule: every earlier
// break-glass run of the breaker in this journal must be among the runs
// the gate saw, each of which it found reviewed. A store that hid a run
// from the gate is found here.
func (st *state) checkBreakGlass(e *entry) {
	bg := e.bg
	if bg.report.BreakGlass == nil {
		// The gate let the run through on this record, so it decoded
		// there: it cannot fail to here. Should it ever, the run fails
		// rather than replay crashing, and no breaker's runs count it.
		e.res.add(GateNotSatisfied, "the break-glass record %.12s… the gate let this run through on does not read as a break-glass record", bg.id)
		return
	}
	who := bg.report.BreakGlass.Breaker
	for _, prev := range st.bgRuns[who] {
		if !bg.seen[prev.id] {
			e.res.add(GateNotSatisfied, "%s: %s broke glass in run %s (seq %d) earlier in this journal, which this run's gate did not see reviewed", BreakGlassUnreviewed, who, prev.report.RunID, prev.report.Seq)
		}
	}
	// Each review the gate relied on goes to the earlier runs of the
	// record it reviews (the breaker's: the gate matched the record to
	// them), and only to them: a review of another record never reviews a
	// run (approval.Policy.Reviewed), so handing every review to every
	// earlier run of the breaker, as before, decided the same at a cost
	// quadratic in the breaker's runs.
	for _, c := range bg.carried {
		for _, prev := range st.bgByRecord[c.record] {
			prev.reviews = append(prev.reviews, c.env)
		}
	}
	st.bgRuns[who] = append(st.bgRuns[who], bg)
	st.bgOrder = append(st.bgOrder, bg)
	st.bgByRecord[bg.id] = append(st.bgByRecord[bg.id], bg)
}

// checkReview judges a review receipt: the reviewer's envelope must be a
// valid review, by the gate's rule at the receipt's time (an approver in
// force, not the breaker, bound to the record, issued after it), of a
// break-glass run earlier in this journal, the one the receipt names. The
// runner's signature only says this host recorded it. A valid one counts
// that run as reviewed (reportBreakGlass).
func (st *state) checkReview(e *entry) {
	r := e.receipt
	env := r.Review.Review
	var rev approval.BreakGlassReview
	if s, err := st.policy.Open(env); err != nil {
		code := BadSignature
		if refusal.Is(err, refusal.PrincipalUnknown) {
			code = UnknownSigner
		}
		e.res.add(code, "review: %v", err)
		return
	} else if s.Type != approval.TypeBreakGlassReview || s.Decode(&rev) != nil {
		e.res.add(Malformed, "review: the envelope is not a break-glass review")
		return
	}
	var bg *bgEntry
	if runs := st.bgByRecord[rev.Record]; len(runs) > 0 {
		bg = runs[0] // the first run of the record (another is evidence_reused)
	}
	if bg == nil || bg.report.BreakGlass == nil {
		e.res.add(ReviewInvalid, "the review names break-glass record %.12s…, which no break-glass run earlier in this journal ran", rev.Record)
		return
	}
	e.res.Operation, e.res.Fingerprint = bg.report.Operation, bg.report.Fingerprint
	if bg.report.RunID != r.RunID {
		e.res.add(ReviewInvalid, "the receipt names run %s, but the review is of run %s", r.RunID, bg.report.RunID)
		return
	}
	if why := st.policy.ReviewProblem(bg.record, env, r.Time); why != "" {
		e.res.add(ReviewInvalid, "the review of run %s is not valid: %s", r.RunID, why)
		return
	}
	bg.reviews = append(bg.reviews, env)
}

// BreakGlassRuns replays the journal r for its break-glass runs alone and
// returns them by the line of their intent (the first line of r is 1),
// each saying whether it is reviewed, as Replay reports them: the same
// code decides, so that receipts list says what replay says
// (docs/adr/0028-break-glass.md). Only what can bear on that is verified:
// intents carrying a break-glass record, and review receipts; the in-order
// checks a review receipt must pass (the chain, the time, the host) run on
// every entry, as in Replay. What else would fail Replay is not looked at.
func (rp *Replayer) BreakGlassRuns(r io.Reader) (map[int]*BreakGlassRun, error) {
	light := *rp
	light.breakGlassOnly, light.Audit, light.Relied, light.Checkpoint, light.FailUnreviewedBreakGlass = true, nil, nil, nil, false
	_, st, err := light.replay(r, func(Result) {})
	var nr *NotReceiptsError
	if err != nil && !errors.As(err, &nr) {
		return nil, err
	}
	out := map[int]*BreakGlassRun{}
	for _, bg := range st.bgOrder {
		if bg.report.BreakGlass != nil {
			out[bg.line] = bg.report.BreakGlass
		}
	}
	return out, nil
}

// reportBreakGlass emits one result per break-glass run, after the
// journal's entries: whether a valid review (one carried by a later
// break-glass of the same breaker, or one of Replayer.BreakGlassReviews)
// reviews it. Unreviewed ones fail only with FailUnreviewedBreakGlass.
func (rp *Replayer) reportBreakGlass(st *state, sum *Summary, emit func(Result)) {
	extra := map[string]map[string][]*approval.Envelope{} // breaker → record → reviews
	for _, bg := range st.bgOrder {
		res := bg.report
		if res.BreakGlass == nil {
			continue
		}
		who := res.BreakGlass.Breaker
		if _, ok := extra[who]; !ok && rp.BreakGlassReviews != nil {
			extra[who] = reviewsByRecord(rp.Policy, rp.BreakGlassReviews(who))
		}
		reviews := append(bg.reviews[:len(bg.reviews):len(bg.reviews)], extra[who][bg.id]...)
		// Judged at the latest time (a review may come any time after).
		res.BreakGlass.Reviewed = rp.Policy.Reviewed(bg.record, reviews, maxTime(st.latest, time.Now()))
		sum.BreakGlass++
		if !res.BreakGlass.Reviewed {
			sum.BreakGlassUnreviewed++
			p := Problem{Code: BreakGlassUnreviewed, Detail: "no approver other than " + who + " has reviewed this break-glass run (prod-write break-glass review " + res.RunID + ")"}
			if rp.FailUnreviewedBreakGlass {
				res.Problems = append(res.Problems, p)
				sum.Failed++
			} else {
				res.Warnings = append(res.Warnings, p)
			}
		}
		res.OK = len(res.Problems) == 0
		emit(res)
	}
}

// reviewsByRecord sorts reviews by the record each names, so that a run
// is judged with the reviews of its own record only: what does not open
// as a break-glass review, or names another record, never reviews it
// (approval.Policy.Reviewed), and a breaker's many reviews are not judged
// again for each of its runs.
func reviewsByRecord(p *approval.Policy, envs []*approval.Envelope) map[string][]*approval.Envelope {
	out := map[string][]*approval.Envelope{}
	for _, env := range envs {
		var r approval.BreakGlassReview
		if s, err := p.Open(env); err == nil && s.Type == approval.TypeBreakGlassReview && s.Decode(&r) == nil {
			out[r.Record] = append(out[r.Record], env)
		}
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
