package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/visible"
)

// Notice is what a bridge adds to a posted decision after posting it.
type Notice struct {
	// Kind is the event it makes: EventReminded, EventEscalated,
	// EventDecided or EventExpired.
	Kind string
	// Text is plain text; a bridge shows it as such (no markup).
	Text string
	// Mention lists the principals to notify by name (their Slack member
	// ids or GitHub logins come from the trust policy, never from text).
	Mention []*approval.Principal
	// Final closes the decision: no more answers are asked for there.
	Final bool
	// Approved says a final notice closes it because the gate opened.
	Approved bool
	// Reopened says a decision announced as approved takes answers again:
	// its gate closed before the plan ran (docs/adr/0035-an-approval-that-stops-holding.md).
	// The Slack message is updated to the view, the GitHub issue reopened.
	Reopened bool
}

// Follower is a [Poster] that can tell a posted decision what happened:
// the requester hears back there, and approvers are reminded there.
type Follower interface {
	Poster
	// FollowUp adds n to the decision at p (a reply in the Slack thread,
	// a comment on the GitHub issue); a final notice also closes it (the
	// Slack message is updated to v, the issue closed), and one that
	// reopens it opens it again (the message updated to v, the issue
	// reopened).
	FollowUp(ctx context.Context, p Post, v *View, n Notice) error
	// Escalate puts the decision in front of to (a Slack channel, a
	// GitHub @team or @login). It returns the new post when it made one.
	Escalate(ctx context.Context, p Post, v *View, to string, n Notice) (*Post, error)
}

// FollowUps closes the loop of every posted decision (docs/BRIDGES.md,
// "Hearing back, reminders and escalation"): when the request is decided
// or expires the requester is told where it was asked; while it is
// pending, the approvers asked are reminded after Settings.RemindAfter and
// the decision is escalated after Settings.EscalateAfter. Each step is
// recorded in Events, once per post. It decides nothing the gate judges.
type FollowUps struct {
	Source   Source
	Ledger   *Ledger
	Events   *Events
	Posters  []Poster
	Settings Settings
	Log      *slog.Logger
	Now      func() time.Time
}

// Run checks every open decision each interval until ctx ends.
func (f *FollowUps) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		f.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check makes one pass over the ledger.
func (f *FollowUps) Check(ctx context.Context) {
	posts, err := f.Ledger.All()
	if err != nil {
		f.Log.Error("follow-ups: reading the ledger", "err", err)
		return
	}
	byFP := map[string][]Post{}
	var order []string
	for _, p := range posts {
		if _, ok := byFP[p.Fingerprint]; !ok {
			order = append(order, p.Fingerprint)
		}
		byFP[p.Fingerprint] = append(byFP[p.Fingerprint], p)
	}
	for _, fp := range order {
		if ctx.Err() != nil {
			return
		}
		if err := f.checkPlan(ctx, fp, byFP[fp]); err != nil {
			f.Log.Warn("follow-ups", "fingerprint", fp, "err", err)
		}
	}
}

// standing is where the follow-ups of one post stand: its round (how many
// times an approval it announced stopped holding before the plan ran) and
// the event that ended the round, nil while the round is open.
type standing struct {
	round int
	ended *Event
}

// announcedApproval reports whether the post's round ended in an announced
// approval, which the follow-ups watch until the plan runs or the gate
// closes again (docs/adr/0035-an-approval-that-stops-holding.md).
func (s standing) announcedApproval() bool {
	return s.ended != nil && s.ended.Kind == EventDecided && s.ended.Approved
}

// stand reads where post p of plan fp stands from the events. A round ends
// with a decided or expired event; one that announced the gate open stays
// watched until a ran event (the plan ran) or an unapproved event (it
// stopped holding before that), which ends the post's follow-ups when
// final and otherwise opens the next round.
func (f *FollowUps) stand(fp string, p Post) (standing, error) {
	where := p.Where()
	get := func(kind string, round int) (*Event, error) { return f.Events.Get(fp, kind, p.Record, where, round) }
	for round := 0; ; round++ {
		var ended *Event
		for _, kind := range []string{EventDecided, EventExpired} {
			e, err := get(kind, round)
			if err != nil {
				return standing{}, err
			}
			if e != nil {
				ended = e
				break
			}
		}
		// A decided event recorded before approvals were watched says
		// nothing of Approved: such a post is left as it was.
		if ended == nil || !ended.Approved {
			return standing{round, ended}, nil
		}
		ran, err := get(EventRan, round)
		if err != nil {
			return standing{}, err
		}
		if ran != nil {
			return standing{round, ran}, nil
		}
		un, err := get(EventUnapproved, round)
		if err != nil {
			return standing{}, err
		}
		if un == nil {
			return standing{round, ended}, nil
		}
		if un.Final {
			return standing{round, un}, nil
		}
	}
}

// followed is a post and where its follow-ups stand.
type followed struct {
	Post
	standing
}

func (f *FollowUps) checkPlan(ctx context.Context, fp string, posts []Post) error {
	var open, approved []followed
	for _, p := range posts {
		st, err := f.stand(fp, p)
		switch {
		case err != nil:
			f.Log.Warn("follow-ups: reading events", "where", p.Where(), "err", err)
		case st.ended == nil:
			open = append(open, followed{p, st})
		case st.announcedApproval():
			approved = append(approved, followed{p, st})
		}
	}
	if len(open) == 0 && len(approved) == 0 {
		return nil
	}
	now := f.Now().UTC()
	src := f.Source.Now()
	j, err := Judge(src, fp, now)
	if err != nil {
		return err
	}
	events, err := f.Events.List(fp)
	if err != nil {
		return err
	}
	req := j.Request(src.Policy, posts, events, f.Settings)
	settings := f.Settings.For(j.Op) // the operation's own rules win
	if req == nil {
		return nil
	}
	byKind := map[string]Follower{}
	for _, p := range f.Posters {
		if fl, ok := p.(Follower); ok {
			byKind[p.Kind()] = fl
		}
	}
	for _, p := range approved {
		if fl := byKind[p.Kind]; fl != nil {
			if err := f.stillApproved(ctx, fl, p, j, req); err != nil {
				f.Log.Warn("follow-ups", "where", p.Where(), "err", err)
			}
		}
	}
	if req.State == RequestWithdrawn {
		return nil // withdraw closed the posts itself
	}
	if j.Refusal != nil && j.Refusal.Code == refusal.EvidenceUnreadable {
		// The gate cannot read the plan's evidence, so neither which
		// record is current nor when the request expires is known:
		// nothing is said until it can.
		return nil
	}
	for _, p := range open {
		fl := byKind[p.Kind]
		if fl == nil || j.announced(p.Record) {
			continue
		}
		v := j.View(p.Record)
		if p.Record != req.Record {
			// An older record's post: a newer record was filed, and
			// its own post carries the request on.
			if v.Closed() {
				_ = f.do(ctx, fl, p, v, Notice{Kind: EventExpired, Final: true,
					Text: "This certainty record no longer counts (a newer one was filed, or it expired): answers here count no more."}, 0)
			}
			continue
		}
		switch req.State {
		case RequestApproved, RequestDenied:
			err = f.do(ctx, fl, p, v, Notice{Kind: EventDecided, Final: true, Approved: req.State == RequestApproved, Text: decidedText(req)}, j.Runs)
		case RequestExpired:
			err = f.do(ctx, fl, p, v, Notice{Kind: EventExpired, Final: true,
				Text: fmt.Sprintf("Expired at %s with no decision: the request fails closed and nothing may run. The requester (%s) must plan and ask again.", stamp(req.Expires), j.Plan.Planner)}, 0)
		case RequestPending:
			err = f.pending(ctx, fl, p, v, req, settings, now)
		}
		if err != nil {
			f.Log.Warn("follow-ups", "where", p.Where(), "err", err)
		}
	}
	return nil
}

// announced reports whether record is a break-glass record of the plan: a
// post about it is the notice break-glass posted ([Announce]), not a
// decision, and nothing is asked or closed there.
func (j *Judgement) announced(record string) bool {
	if j.Decision == nil {
		return false
	}
	for _, a := range j.Decision.Evidence {
		if a.ID == record && a.Kind == approval.KindBreakGlass {
			return true
		}
	}
	return false
}

// stillApproved follows a post that announced the gate open. Once the
// plan ran after that (the store counts more runs than when it was
// announced: a single-use approval spent by the run it was for) nothing is
// said and the post is followed no more. While the gate is still open
// nothing is said either. Once it is closed again before a run, whatever
// closed it (a veto, an approval or the record expiring, evidence the gate
// cannot read, the breaker's unreviewed break-glass run, a freeze, the
// trust policy), the post is told once that the approval no longer holds
// and why, and is shown as it stands: it takes answers again (the GitHub
// issue reopened), unless the decision is now closed for good (denied,
// expired, or a record that no longer counts). A withdrawal is told by
// withdraw itself.
func (f *FollowUps) stillApproved(ctx context.Context, fl Follower, p followed, j *Judgement, req *DecisionRequest) error {
	if j.Runs > p.ended.Runs {
		return f.Events.Add(Event{Kind: EventRan, Fingerprint: p.Fingerprint, Record: p.Record, Where: p.Where(), At: f.Now().UTC(),
			Round: p.round, Runs: j.Runs, Detail: "the plan ran after its approval was announced here"})
	}
	r := j.Refusal
	if r == nil || req.State == RequestWithdrawn {
		return nil
	}
	v := j.View(p.Record)
	why := r.Reason
	if r.Code == refusal.EvidenceUnreadable {
		// Its reason names the bridge host's files: status shows it.
		why = "evidence for this plan cannot be read (prod-write status says which)"
	}
	text := fmt.Sprintf("No longer approved: the gate closed again before the plan ran, and `prod-write run %s` refuses it now (%s): %s", req.Fingerprint, r.Code, why)
	n := Notice{Kind: EventUnapproved}
	switch {
	case r.Code == refusal.EvidenceUnreadable:
		// Nothing about the record (which is current, who is asked,
		// when it expires) is known until the gate reads the evidence
		// again: open, and judged again then.
		n.Reopened = true
		text += "\nNothing may run until the evidence is readable again (prod-write doctor); this decision is judged again then."
	case req.State == RequestDenied:
		n.Final, text = true, text+"\n"+decidedText(req)
	case req.State == RequestExpired:
		n.Final = true
		text += fmt.Sprintf("\nExpired at %s: the request fails closed and nothing may run. The requester (%s) must plan and ask again.", stamp(req.Expires), j.Plan.Planner)
	case p.Record != req.Record && v.Closed():
		n.Final, text = true, text+"\nThis certainty record no longer counts: answers here count no more."
	}
	if !n.Final && !n.Reopened {
		n.Reopened, n.Mention = true, f.asked(req)
		text += "\nAnswers here count again."
		if len(req.Missing) > 0 {
			text += " Missing: " + strings.Join(req.Missing, "; ") + "."
		}
	}
	n.Text = text
	return f.do(ctx, fl, p, v, n, 0)
}

func (f *FollowUps) pending(ctx context.Context, fl Follower, p followed, v *View, req *DecisionRequest, s Settings, now time.Time) error {
	if p.Escalation || p.round > 0 {
		// Reminders go to the first post (an escalation is one
		// already), once: a decision open again after its approval
		// stopped holding was told so with the approvers asked.
		return nil
	}
	age := now.Sub(p.Posted)
	asked := f.asked(req)
	if s.RemindAfter > 0 && age >= s.RemindAfter && !f.Events.Has(p.Fingerprint, EventReminded, p.Record, p.Where()) {
		text := fmt.Sprintf("Reminder: this decision has waited %s for an answer (%s). It expires at %s.", age.Round(time.Second), strings.Join(req.Missing, "; "), stamp(req.Expires))
		if err := f.do(ctx, fl, p, v, Notice{Kind: EventReminded, Text: text, Mention: asked}, 0); err != nil {
			return err
		}
	}
	if s.EscalateAfter > 0 && age >= s.EscalateAfter && !f.Events.Has(p.Fingerprint, EventEscalated, p.Record, p.Where()) {
		to := s.EscalateSlack
		if p.Kind == KindGitHub {
			to = s.EscalateGitHub
		}
		if to == "" {
			return nil
		}
		text := fmt.Sprintf("Escalated: nobody answered this decision in %s. It expires at %s.", age.Round(time.Second), stamp(req.Expires))
		np, err := fl.Escalate(ctx, p.Post, v, to, Notice{Kind: EventEscalated, Text: text})
		if err != nil {
			return fmt.Errorf("escalating to %s: %w", to, err)
		}
		if np != nil {
			np.Escalation = true
			if err := f.Ledger.Add(*np); err != nil {
				return err
			}
		}
		f.Log.Info("follow-ups: escalated", "where", p.Where(), "to", to)
		return f.Events.Add(Event{Kind: EventEscalated, Fingerprint: p.Fingerprint, Record: p.Record, Where: p.Where(), At: now, Detail: to})
	}
	return nil
}

// asked are the principals the request waits on, for mentions.
func (f *FollowUps) asked(req *DecisionRequest) []*approval.Principal {
	var out []*approval.Principal
	seen := map[string]bool{}
	for _, a := range req.Asked {
		if a.Channel != "cli" || a.Role != approval.RoleApprover {
			continue
		}
		for _, id := range a.Who {
			if pr, ok := f.Source.Now().Policy.ByID(id); ok && !seen[id] {
				seen[id] = true
				out = append(out, pr)
			}
		}
	}
	return out
}

// do sends n and records it, in the post's round; runs is the count of
// runs an approval is announced at.
func (f *FollowUps) do(ctx context.Context, fl Follower, p followed, v *View, n Notice, runs int) error {
	if err := fl.FollowUp(ctx, p.Post, v, n); err != nil {
		return fmt.Errorf("%s: %w", n.Kind, err)
	}
	f.Log.Info("follow-ups: "+n.Kind, "where", p.Where(), "round", p.round)
	e := Event{Kind: n.Kind, Fingerprint: p.Fingerprint, Record: p.Record, Where: p.Where(), At: f.Now().UTC(), Detail: n.Text, Round: p.round}
	switch n.Kind {
	case EventDecided:
		if n.Approved {
			e.Approved, e.Runs = true, runs
		}
	case EventUnapproved:
		e.Final = n.Final
	}
	return f.Events.Add(e)
}

// decidedText tells the requester how the request ended, the approver's
// reason verbatim (escaped only so that it shows as itself).
func decidedText(r *DecisionRequest) string {
	d := r.Decision
	if d == nil {
		if r.State == RequestApproved {
			return "Decided: approved. The gate is open."
		}
		return "Decided: denied (vetoed)."
	}
	if r.State == RequestApproved {
		return fmt.Sprintf("Decided: approved (%s by %s, via %s). The gate is open: `prod-write run %s` may run it.", d.Verdict, d.By, d.Via, r.Fingerprint)
	}
	s := fmt.Sprintf("Decided: denied (%s by %s, via %s). This plan can no longer run until the veto expires.", d.Verdict, d.By, d.Via)
	if d.Reason != "" {
		s += "\nReason: " + visible.Text(d.Reason)
	}
	return s
}
