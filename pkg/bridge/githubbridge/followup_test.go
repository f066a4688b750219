package githubbridge_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
)

// followUps are bridge serve's follow-ups of the rig's decision issue,
// their clock at *now.
func (r *rig) followUps(now *time.Time) *bridge.FollowUps {
	return &bridge.FollowUps{Source: r.w.Source(), Ledger: r.w.Ledger, Events: &bridge.Events{Dir: filepath.Join(r.w.Dir, "state", "bridge", "events")},
		Posters: []bridge.Poster{r.poster}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return *now }}
}

// bodies are the comments on the rig's issue after the first skip.
func (r *rig) bodies(skip int) []string {
	var out []string
	for _, c := range r.gh.Issue(r.post.GitHubIssue).Comments[skip:] {
		out = append(out, c.Body)
	}
	return out
}

// An issue closed as completed when break-glass opened the gate is
// reopened, with a comment saying why, when the gate closes again before
// the plan ran (the breaker's earlier break-glass run is unreviewed); a
// veto then closes it as not planned.
func TestIssueReopensWhenTheApprovalStopsHolding(t *testing.T) {
	r := rigOn(t, bridgetest.NewBreakGlass(t, 1), 0)
	now := time.Now().UTC()
	f := r.followUps(&now)
	ctx := context.Background()

	r.w.BreakGlass(t, r.w.FP, now.Add(-time.Minute))
	f.Check(ctx)
	is := r.gh.Issue(r.post.GitHubIssue)
	if is.State != "closed" || is.StateReason != "completed" || len(is.Comments) != 1 || !strings.Contains(is.Comments[0].Body, "Decided: approved") {
		t.Fatalf("the gate opened: issue %s %s, comments %q", is.State, is.StateReason, r.bodies(0))
	}

	other := "sha256:" + strings.Repeat("ab", 32)
	earlier := r.w.BreakGlass(t, other, now.Add(-30*time.Minute))
	if _, err := r.w.Store.Consume(earlier, 1, "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	f.Check(ctx)
	f.Check(ctx)
	is = r.gh.Issue(r.post.GitHubIssue)
	said := r.bodies(1)
	if is.State != "open" || is.StateReason != "reopened" || len(said) != 1 {
		t.Fatalf("the gate closed again: issue %s %s, new comments %q", is.State, is.StateReason, said)
	}
	for _, want := range []string{"@alice @Bob", "No longer approved", "(break_glass_unreviewed)", "Answers here count again", "a review of break-glass record " + earlier} {
		if !strings.Contains(said[0], want) {
			t.Errorf("the comment does not say %q:\n%s", want, said[0])
		}
	}

	r.w.Put(t, bridgetest.Sign(t, "bob", approval.TypeTrinity, approval.Answer{Fingerprint: r.w.FP, Record: r.w.Record, Answer: approval.Deny,
		Approver: "bob", Issued: now.Add(-10 * time.Second), Expires: now.Add(time.Hour)}))
	f.Check(ctx)
	f.Check(ctx)
	is = r.gh.Issue(r.post.GitHubIssue)
	if said := r.bodies(2); is.State != "closed" || is.StateReason != "not_planned" || len(said) != 1 || !strings.Contains(said[0], "Decided: denied") {
		t.Fatalf("vetoed: issue %s %s, new comments %q", is.State, is.StateReason, said)
	}
}

// An issue closed as completed whose approval is vetoed before the plan
// ran is closed again as not planned, with one comment saying so.
func TestIssueVetoedAfterItsApproval(t *testing.T) {
	r := rigOn(t, bridgetest.New(t, 1), 0)
	now := time.Now().UTC()
	f := r.followUps(&now)
	ctx := context.Background()
	r.w.Put(t, bridgetest.Sign(t, "alice", approval.TypeTrinity, approval.Answer{Fingerprint: r.w.FP, Record: r.w.Record, Answer: approval.Approve,
		Approver: "alice", Issued: now.Add(-time.Minute), Expires: now.Add(time.Hour)}))
	f.Check(ctx)
	if is := r.gh.Issue(r.post.GitHubIssue); is.State != "closed" || is.StateReason != "completed" {
		t.Fatalf("approved: issue %s %s", is.State, is.StateReason)
	}
	r.w.Put(t, bridgetest.Sign(t, "bob", approval.TypeTrinity, approval.Answer{Fingerprint: r.w.FP, Record: r.w.Record, Answer: approval.Deny,
		Approver: "bob", Reason: "not today", Issued: now.Add(-10 * time.Second), Expires: now.Add(time.Hour)}))
	f.Check(ctx)
	f.Check(ctx)
	is := r.gh.Issue(r.post.GitHubIssue)
	said := r.bodies(1)
	if is.State != "closed" || is.StateReason != "not_planned" || len(said) != 1 {
		t.Fatalf("vetoed: issue %s %s, new comments %q", is.State, is.StateReason, said)
	}
	for _, want := range []string{"No longer approved", "(vetoed)", "Decided: denied (deny by bob, via cli)", "Reason: not today"} {
		if !strings.Contains(said[0], want) {
			t.Errorf("the comment does not say %q:\n%s", want, said[0])
		}
	}
}
