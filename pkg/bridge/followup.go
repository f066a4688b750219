package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
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
}

// Follower is a [Poster] that can tell a posted decision what happened:
// the requester hears back there, and approvers are reminded there.
type Follower interface {
	Poster
	// FollowUp adds n to the decision at p (a reply in the Slack thread,
	// a comment on the GitHub issue); a final notice also closes it (the
	// Slack message is updated to v, the issue closed).
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

func (f *FollowUps) final(fp string, p Post) bool {
	return f.Events.Has(fp, EventDecided, p.Record, p.Where()) || f.Events.Has(fp, EventExpired, p.Record, p.Where())
}

func (f *FollowUps) checkPlan(ctx context.Context, fp string, posts []Post) error {
	open := posts[:0:0]
	for _, p := range posts {
		if !f.final(fp, p) {
			open = append(open, p)
		}
	}
	if len(open) == 0 {
		return nil
	}
	now := f.Now().UTC()
	j, err := Judge(f.Source, fp, now)
	if err != nil {
		return err
	}
	events, err := f.Events.List(fp)
	if err != nil {
		return err
	}
	req := j.Request(f.Source.Policy, posts, events, f.Settings)
	settings := f.Settings.For(j.Op) // the operation's own rules win
	if req == nil || req.State == RequestWithdrawn {
		return nil // withdraw closed the posts itself
	}
	byKind := map[string]Follower{}
	for _, p := range f.Posters {
		if fl, ok := p.(Follower); ok {
			byKind[p.Kind()] = fl
		}
	}
	for _, p := range open {
		fl := byKind[p.Kind]
		if fl == nil {
			continue
		}
		v := j.View(p.Record)
		if p.Record != req.Record {
			// An older record's post: a newer record was filed, and
			// its own post carries the request on.
			if v.Closed() {
				_ = f.do(ctx, fl, p, v, Notice{Kind: EventExpired, Final: true,
					Text: "This certainty record no longer counts (a newer one was filed, or it expired): answers here count no more."})
			}
			continue
		}
		switch req.State {
		case RequestApproved, RequestDenied:
			err = f.do(ctx, fl, p, v, Notice{Kind: EventDecided, Final: true, Approved: req.State == RequestApproved, Text: decidedText(req)})
		case RequestExpired:
			err = f.do(ctx, fl, p, v, Notice{Kind: EventExpired, Final: true,
				Text: fmt.Sprintf("Expired at %s with no decision: the request fails closed and nothing may run. The requester (%s) must plan and ask again.", stamp(req.Expires), j.Plan.Planner)})
		case RequestPending:
			err = f.pending(ctx, fl, p, v, req, settings, now)
		}
		if err != nil {
			f.Log.Warn("follow-ups", "where", p.Where(), "err", err)
		}
	}
	return nil
}

func (f *FollowUps) pending(ctx context.Context, fl Follower, p Post, v *View, req *DecisionRequest, s Settings, now time.Time) error {
	if p.Escalation {
		return nil // reminders go to the first post; an escalation is one already
	}
	age := now.Sub(p.Posted)
	asked := f.asked(req)
	if s.RemindAfter > 0 && age >= s.RemindAfter && !f.Events.Has(p.Fingerprint, EventReminded, p.Record, p.Where()) {
		text := fmt.Sprintf("Reminder: this decision has waited %s for an answer (%s). It expires at %s.", age.Round(time.Second), strings.Join(req.Missing, "; "), stamp(req.Expires))
		if err := f.do(ctx, fl, p, v, Notice{Kind: EventReminded, Text: text, Mention: asked}); err != nil {
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
		np, err := fl.Escalate(ctx, p, v, to, Notice{Kind: EventEscalated, Text: text})
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
			if pr, ok := f.Source.Policy.ByID(id); ok && !seen[id] {
				seen[id] = true
				out = append(out, pr)
			}
		}
	}
	return out
}

// do sends n and records it.
func (f *FollowUps) do(ctx context.Context, fl Follower, p Post, v *View, n Notice) error {
	if err := fl.FollowUp(ctx, p, v, n); err != nil {
		return fmt.Errorf("%s: %w", n.Kind, err)
	}
	f.Log.Info("follow-ups: "+n.Kind, "where", p.Where())
	return f.Events.Add(Event{Kind: n.Kind, Fingerprint: p.Fingerprint, Record: p.Record, Where: p.Where(), At: f.Now().UTC(), Detail: n.Text})
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
		s += "\nReason: " + Clean(d.Reason)
	}
	return s
}
