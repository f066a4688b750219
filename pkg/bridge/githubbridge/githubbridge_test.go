package githubbridge_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/bridge/githubbridge"
	"github.com/prod-write/prod-write/pkg/refusal"
)

const token = "github_pat_test_0123456789"

type rig struct {
	w      *bridgetest.World
	gh     *bridgetest.FakeGitHub
	poster *githubbridge.Poster
	post   bridge.Post
	log    *strings.Builder
}

func newRig(t *testing.T, approvers, pr int) *rig {
	t.Helper()
	return rigOn(t, bridgetest.New(t, approvers), pr)
}

// rigOn is the rig of world w, its record w.Record posted on GitHub (on
// pull request pr, when not 0).
func rigOn(t *testing.T, w *bridgetest.World, pr int) *rig {
	t.Helper()
	r := &rig{w: w, gh: bridgetest.NewFakeGitHub("acme", "prod-decisions", token), log: &strings.Builder{}}
	t.Cleanup(r.gh.Close)
	client, err := githubbridge.NewClient(r.gh.APIURL(), bridgetest.Secret(token), nil)
	if err != nil {
		t.Fatal(err)
	}
	if pr != 0 {
		r.gh.AddPR(pr)
	}
	r.poster = &githubbridge.Poster{Client: client, Owner: "acme", Repo: "prod-decisions", PR: pr}
	r.post = r.notify(t)
	return r
}

func (r *rig) notify(t *testing.T) bridge.Post {
	t.Helper()
	v, err := bridge.Describe(r.w.Source(), r.w.FP, r.w.Record, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	posts, errs := bridge.Notify(context.Background(), r.w.Ledger, []bridge.Poster{r.poster}, v)
	if len(errs) != 0 || len(posts) != 1 {
		t.Fatalf("Notify: %v", errs)
	}
	return posts[0]
}

func (r *rig) poller(t *testing.T) *githubbridge.Poller {
	return &githubbridge.Poller{Client: r.poster.Client, Owner: "acme", Repo: "prod-decisions", Attestor: r.w.Attestor(t),
		Ledger: r.w.Ledger, Log: slog.New(slog.NewTextHandler(r.log, nil)), Token: bridgetest.Secret(token)}
}

func (r *rig) comment(login, body string) int64 {
	return r.gh.AddComment(r.post.GitHubIssue, login, body, time.Now().Add(-time.Minute), false)
}

func poll(t *testing.T, p *githubbridge.Poller) githubbridge.Counts {
	t.Helper()
	n, err := p.PollOnce(context.Background())
	if err != nil {
		t.Fatalf("PollOnce: %v", err)
	}
	return n
}

func TestDecisionIssueShowsTheDecision(t *testing.T) {
	r := newRig(t, 1, 0)
	is := r.gh.Issue(r.post.GitHubIssue)
	if is == nil || is.State != "open" {
		t.Fatalf("no open decision issue: %+v", is)
	}
	if !strings.Contains(is.Title, "touch-flag on staging") {
		t.Errorf("title %q", is.Title)
	}
	for _, want := range []string{"/approve " + r.w.FP, "/deny " + r.w.FP, "/usr/bin/touch", "touch the ready flag",
		"Planned by:  agent", "Filed by:     smith", "Expires:", r.w.Record} {
		if !strings.Contains(is.Body, want) {
			t.Errorf("the issue does not show %q", want)
		}
	}
	if r.post.GitHubRepo != "acme/prod-decisions" || r.post.GitHubPR || r.post.URL == "" {
		t.Errorf("post %+v", r.post)
	}
}

// Approval by a mapped login is recorded once, names the login and the
// comment, opens the gate, and is acknowledged once; polling again, or
// after a restart, records nothing new.
func TestMappedLoginApproves(t *testing.T) {
	r := newRig(t, 1, 0)
	id := r.comment("alice", "/approve "+r.w.FP+"\nlooks right to me")
	p := r.poller(t)
	if n := poll(t, p); n.Recorded != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	answers := r.w.Answers(t)
	if len(answers) != 1 {
		t.Fatalf("%d answers", len(answers))
	}
	a := answers[0]
	if a.Approver != "alice" || a.Answer != "approve" || a.Record != r.w.Record || a.Reason != "looks right to me" {
		t.Errorf("answer %+v", a)
	}
	if a.Channel == nil || a.Channel.Kind != "github" || a.Channel.GitHubLogin != "alice" || a.Channel.GitHubComment != id || a.Channel.GitHubRepo != "acme/prod-decisions" {
		t.Errorf("channel %+v", a.Channel)
	}
	if err := r.w.Gate(t); err != nil {
		t.Fatalf("gate: %v", err)
	}
	acks := 0
	for _, c := range r.gh.Issue(r.post.GitHubIssue).Comments {
		if c.Login == "prod-write-bot" && strings.HasPrefix(c.Body, "Recorded: **approve** by alice") {
			acks++
		}
	}
	if acks != 1 {
		t.Errorf("%d acknowledgements", acks)
	}
	if n := poll(t, p); n.Recorded != 0 {
		t.Errorf("second poll: %+v", n)
	}
	if n := poll(t, r.poller(t)); n.Recorded != 0 || n.Duplicates != 1 {
		t.Errorf("poll after a restart: %+v", n)
	}
	if got := len(r.w.Answers(t)); got != 1 {
		t.Errorf("%d answers after polling again", got)
	}
	if got := len(r.gh.Issue(r.post.GitHubIssue).Comments); got != 2 {
		t.Errorf("%d comments: acknowledged more than once", got)
	}
}

// Comments that must not count.
func TestCommentsThatDoNotCount(t *testing.T) {
	for _, tc := range []struct {
		name   string
		add    func(r *rig)
		reason string
	}{
		{"unmapped login", func(r *rig) { r.comment("mallory", "/approve "+r.w.FP) }, "maps to no principal"},
		{"the planner's login", func(r *rig) { r.comment("agent-gh", "/approve "+r.w.FP) }, "agent planned this"},
		{"the filer's login", func(r *rig) { r.comment("smith-gh", "/approve "+r.w.FP) }, "smith filed the certainty record"},
		{"a mapped login that is not an approver", func(r *rig) { r.comment("eve", "/approve "+r.w.FP) }, "does not hold the approver role"},
		{"an edited comment", func(r *rig) {
			r.gh.AddComment(r.post.GitHubIssue, "alice", "/approve "+r.w.FP, time.Now().Add(-time.Minute), true)
		}, "edited comment does not count"},
		{"a near-miss fingerprint prefix", func(r *rig) { r.comment("alice", "/approve "+r.w.FP[:len(r.w.FP)-1]) }, ""},
		{"a short prefix", func(r *rig) { r.comment("alice", "/approve "+r.w.FP[:19]) }, ""},
		{"a fingerprint with a suffix", func(r *rig) { r.comment("alice", "/approve "+r.w.FP+"0") }, ""},
		{"another plan's fingerprint", func(r *rig) { r.comment("alice", "/approve sha256:"+strings.Repeat("ab", 32)) }, "no decision here"},
		{"an upper-case fingerprint", func(r *rig) { r.comment("alice", "/approve "+strings.ToUpper(r.w.FP)) }, ""},
		{"the command not on the first line", func(r *rig) { r.comment("alice", "I think\n/approve "+r.w.FP) }, ""},
		{"a quoted command", func(r *rig) { r.comment("alice", "> /approve "+r.w.FP) }, ""},
		{"an old comment", func(r *rig) {
			r.gh.AddComment(r.post.GitHubIssue, "alice", "/approve "+r.w.FP, time.Now().Add(-2*time.Hour), false)
		}, "older than an answer lives"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1, 0)
			tc.add(r)
			n := poll(t, r.poller(t))
			if n.Recorded != 0 {
				t.Errorf("recorded: %+v", n)
			}
			if got := len(r.w.Answers(t)); got != 0 {
				t.Errorf("%d answers", got)
			}
			if err := r.w.Gate(t); !refusal.Is(err, refusal.NoApproval) {
				t.Errorf("gate: %v", err)
			}
			if tc.reason != "" && !strings.Contains(r.log.String(), tc.reason) {
				t.Errorf("log does not say %q:\n%s", tc.reason, r.log)
			}
			if strings.Contains(r.log.String(), token) {
				t.Errorf("the token reached the log")
			}
		})
	}
}

// GitHub logins are case-insensitive: "BOB" is the principal whose github
// is "Bob". A deny is a veto.
func TestLoginCaseAndDeny(t *testing.T) {
	r := newRig(t, 1, 0)
	r.comment("alice", "/approve "+r.w.FP)
	r.comment("BOB", "/deny "+r.w.FP+"\nnot during the freeze")
	if n := poll(t, r.poller(t)); n.Recorded != 2 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	if err := r.w.Gate(t); !refusal.Is(err, refusal.Vetoed) {
		t.Fatalf("gate: %v", err)
	}
}

// Commands beyond the first page of comments are found.
func TestPagination(t *testing.T) {
	r := newRig(t, 1, 0)
	for i := 0; i < 230; i++ {
		r.comment("someone", "+1")
	}
	r.comment("alice", "/approve "+r.w.FP)
	if n := poll(t, r.poller(t)); n.Recorded != 1 {
		t.Fatalf("poll: %+v", n)
	}
}

// On a pull request, a command answers the newest decision comment before
// it; a command before any decision answers nothing.
func TestPullRequestComments(t *testing.T) {
	r := newRig(t, 1, 42)
	if !r.post.GitHubPR || r.post.GitHubIssue != 42 || r.post.GitHubComment == 0 {
		t.Fatalf("post %+v", r.post)
	}
	if is := r.gh.Issue(42); len(is.Comments) != 1 || !strings.Contains(is.Comments[0].Body, "/approve "+r.w.FP) {
		t.Fatalf("the decision is not commented on the pull request")
	}
	r.comment("alice", "/approve "+r.w.FP)
	if n := poll(t, r.poller(t)); n.Recorded != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	if a := r.w.Answers(t); len(a) != 1 || a[0].Record != r.w.Record {
		t.Fatalf("answers %+v", a)
	}
}

// Withdrawing comments on the decision issue and closes it; a command
// after that is not recorded.
func TestWithdrawClosesTheIssue(t *testing.T) {
	r := newRig(t, 1, 0)
	r.w.Withdraw(t)
	done, errs := bridge.NotifyWithdrawn(context.Background(), r.w.Ledger, []bridge.Poster{r.poster}, r.w.FP, func(rec string) (*bridge.View, error) {
		return bridge.Describe(r.w.Source(), r.w.FP, rec, time.Now())
	})
	if len(errs) != 0 || len(done) != 1 {
		t.Fatalf("NotifyWithdrawn: %v %v", done, errs)
	}
	is := r.gh.Issue(r.post.GitHubIssue)
	if is.State != "closed" || is.StateReason != "not_planned" {
		t.Errorf("issue state %q (%q)", is.State, is.StateReason)
	}
	if len(is.Comments) != 1 || !strings.HasPrefix(is.Comments[0].Body, "**Withdrawn** by the planner (agent)") {
		t.Errorf("comments %+v", is.Comments)
	}
	r.comment("alice", "/approve "+r.w.FP)
	if n := poll(t, r.poller(t)); n.Recorded != 0 {
		t.Errorf("poll after withdraw: %+v", n)
	}
	if got := len(r.w.Answers(t)); got != 0 {
		t.Errorf("%d answers", got)
	}
}

// A withdrawn decision on a pull request gets a comment; the pull request
// stays open.
func TestWithdrawOnPullRequest(t *testing.T) {
	r := newRig(t, 1, 7)
	r.w.Withdraw(t)
	_, errs := bridge.NotifyWithdrawn(context.Background(), r.w.Ledger, []bridge.Poster{r.poster}, r.w.FP, func(rec string) (*bridge.View, error) {
		return bridge.Describe(r.w.Source(), r.w.FP, rec, time.Now())
	})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	is := r.gh.Issue(7)
	if is.State != "open" || len(is.Comments) != 2 || !strings.Contains(is.Comments[1].Body, "Withdrawn") {
		t.Errorf("pull request %+v", is)
	}
}

// TestParseCommand: the white-space rule of docs/BRIDGES.md. Spaces and
// tabs around the command, and a CRLF's carriage return, are ignored;
// exactly one space separates the verb and the fingerprint; a deny may
// carry its reason on its line; nothing else may share the line, and no
// other white space is trimmed.
func TestParseCommand(t *testing.T) {
	fp := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		body    string
		verdict string
		reason  string
	}{
		{"/approve " + fp, "approve", ""},
		{"  /deny " + fp + "  \r\nreason", "deny", "reason"},
		{"\t /approve " + fp + " \t", "approve", ""},
		{"/approve " + fp + "\r\n", "approve", ""},
		{"/approve " + fp + "\nlooks right\nto me", "approve", "looks right\nto me"},
		{"/deny " + fp + " not during the freeze", "deny", "not during the freeze"},
		{"/deny " + fp + "\tnot now \t\nsee #12", "deny", "not now\nsee #12"},
		{"/approve  " + fp, "", ""},
		{"/approve\t" + fp, "", ""},
		{"/approve " + fp + ".", "", ""},
		{"/approve " + fp + " please", "", ""},
		{"/deny " + fp + "0", "", ""},
		{"/deny " + fp + "-now", "", ""},
		{"/approve" + fp, "", ""},
		{"/APPROVE " + fp, "", ""},
		{"/Approve " + fp, "", ""},
		{"/approve " + strings.ToUpper(fp), "", ""},
		{"approve " + fp, "", ""},
		{"/approve " + fp[:70], "", ""},
		{"\u00a0/approve " + fp, "", ""},
		{"/approve " + fp + "\u00a0", "", ""},
		{"\u2003/approve " + fp, "", ""},
		{"\u200b/approve " + fp, "", ""},
		{"\ufeff/approve " + fp, "", ""},
		{"\v/approve " + fp, "", ""},
		{"/approve " + fp + "\f", "", ""},
		{"/approve " + fp + "\r \n", "", ""},
		{"\n/approve " + fp, "", ""},
		{"> /approve " + fp, "", ""},
		{"`/approve " + fp + "`", "", ""},
		{"", "", ""},
	} {
		v, got, reason, ok := githubbridge.ParseCommand(tc.body)
		if v != tc.verdict || ok != (tc.verdict != "") || (ok && (got != fp || reason != tc.reason)) {
			t.Errorf("ParseCommand(%q) = %q %q %q %v, want %q with reason %q", tc.body, v, got, reason, ok, tc.verdict, tc.reason)
		}
	}
}

func TestBadToken(t *testing.T) {
	r := newRig(t, 1, 0)
	client, _ := githubbridge.NewClient(r.gh.APIURL(), bridgetest.Secret("wrong-token-value"), nil)
	p := &githubbridge.Poster{Client: client, Owner: "acme", Repo: "prod-decisions"}
	v, _ := bridge.Describe(r.w.Source(), r.w.FP, r.w.Record, time.Now())
	_, err := p.Post(context.Background(), v)
	if err == nil || strings.Contains(err.Error(), "wrong-token-value") {
		t.Fatalf("err %v", err)
	}
}
