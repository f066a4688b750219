package githubbridge_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// addReview submits a review on the decision pull request with no webhook
// delivered (lost, or the bridge was down).
func (r *rig) addReview(login string, id int64, state, body string) bridgetest.FakeReview {
	return r.gh.AddReview(r.post.GitHubIssue, bridgetest.FakeReview{Login: login, UserID: id, State: state, Body: body})
}

// reviewDelivery is the pull_request_review webhook delivery of rv.
func (r *rig) reviewDelivery(rv bridgetest.FakeReview) *http.Request {
	return bridgetest.GitHubWebhook("/github/webhook", hookSecret, "pull_request_review", newDelivery(), r.gh.ReviewPayload("submitted", r.post.GitHubIssue, rv))
}

// A review whose webhook delivery was lost is recorded by the next poll,
// once: polling again, the delivery arriving late, and a restarted bridge
// record nothing more and acknowledge nothing more.
func TestPollRecordsAReviewWhoseWebhookWasLost(t *testing.T) {
	r := newRig(t, 1, 42)
	p := r.poller(t)
	rv := r.addReview("alice", bridgetest.GitHubUserID("alice"), "approved", "/approve "+r.w.FP+"\nread the plan")
	if n := poll(t, p); n.Recorded != 1 {
		t.Fatalf("poll after a review with no webhook: %+v\n%s", n, r.log)
	}
	a := r.w.Answers(t)
	if len(a) != 1 || a[0].Approver != "alice" || a[0].Answer != "approve" || a[0].Reason != "read the plan" ||
		a[0].Channel.GitHubReview != rv.ID || a[0].Channel.GitHubComment != 0 || a[0].Channel.GitHubUserID != bridgetest.GitHubUserID("alice") {
		t.Fatalf("answers %+v", a)
	}
	if err := r.w.Gate(t); err != nil {
		t.Fatalf("gate: %v", err)
	}
	if n := poll(t, p); n.Recorded+n.Duplicates != 0 {
		t.Errorf("second poll: %+v", n)
	}
	if got := deliver(r.hook(p), r.reviewDelivery(rv)); got.code != http.StatusOK || !strings.HasPrefix(got.body, "already judged") {
		t.Errorf("the late delivery: %+v", got)
	}
	restarted := r.poller(t)
	if n := poll(t, restarted); n.Recorded != 0 || n.Duplicates != 1 {
		t.Errorf("poll after a restart: %+v", n)
	}
	if got := deliver(r.hook(r.poller(t)), r.reviewDelivery(rv)); got.code != http.StatusOK || !strings.HasPrefix(got.body, "already recorded") {
		t.Errorf("the late delivery after a restart: %+v", got)
	}
	if n := len(r.w.Answers(t)); n != 1 || r.acks() != 1 {
		t.Fatalf("%d answers, %d acknowledgements, want 1 and 1", n, r.acks())
	}
}

// Polled reviews that do not count are judged by the webhook's rules, and
// a refused one gets one reply, however often it is read again (polling
// again, a restarted bridge): an ordinary review, a state that disagrees
// with the command, a comment-only review, the planner's or the filer's
// review, a renamed login, a stranger (no reply), another fingerprint, a
// review edited into the command (the REST listing cannot show that:
// GraphQL's lastEditedAt does), an edit GraphQL has not caught up with (its
// body is not the listing's), a dismissed review.
func TestPolledReviewsThatDoNotCount(t *testing.T) {
	for _, tc := range []struct {
		name, login string
		id          int64
		state, body string
		edit        string // the body a repository admin edits the review into
		stale       bool   // GraphQL has not seen the edit yet
		dismiss     bool
		reply       string // what the one reply says; "" for none
		log         string
	}{
		{name: "an approval without the command", login: "alice", state: "approved", body: "LGTM"},
		{name: "approve state, deny command", login: "alice", state: "approved", body: "/deny FP", reply: "state is APPROVED but its first line is /deny"},
		{name: "request changes, approve command", login: "alice", state: "changes_requested", body: "/approve FP", reply: "state is CHANGES_REQUESTED but its first line is /approve"},
		{name: "a comment-only review", login: "alice", state: "commented", body: "/approve FP", reply: "state is COMMENTED"},
		{name: "the planner", login: "agent-gh", state: "approved", body: "/approve FP", reply: "agent planned this"},
		{name: "the filer", login: "smith-gh", state: "approved", body: "/approve FP", reply: "smith filed the certainty record"},
		{name: "a renamed login", login: "alice", id: 4242, state: "approved", body: "/approve FP", reply: "renamed or re-registered"},
		{name: "a stranger", login: "mallory", state: "approved", body: "/approve FP", log: "maps to no principal"},
		{name: "another fingerprint", login: "alice", state: "approved", body: "/approve sha256:" + strings.Repeat("ab", 32), log: "no decision here"},
		{name: "an approval edited into the command", login: "alice", state: "approved", body: "LGTM", edit: "/approve FP", log: "edited review does not count"},
		{name: "an edit GraphQL has not seen", login: "alice", state: "approved", body: "LGTM", edit: "/approve FP", stale: true, log: "edited review does not count"},
		{name: "a dismissed review", login: "alice", state: "approved", body: "/approve FP", dismiss: true, log: "dismissed review does not count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1, 42)
			id := tc.id
			if id == 0 {
				id = bridgetest.GitHubUserID(tc.login)
			}
			rv := r.addReview(tc.login, id, tc.state, strings.ReplaceAll(tc.body, "FP", r.w.FP))
			if tc.edit != "" {
				r.gh.EditReview(42, rv.ID, strings.ReplaceAll(tc.edit, "FP", r.w.FP), tc.stale)
			}
			if tc.dismiss {
				r.gh.DismissReview(42, rv.ID)
			}
			p := r.poller(t)
			n := poll(t, p)
			poll(t, p)
			poll(t, r.poller(t)) // a restarted bridge
			if n.Recorded != 0 || len(r.w.Answers(t)) != 0 {
				t.Fatalf("recorded: %+v\n%s", n, r.log)
			}
			if err := r.w.Gate(t); !refusal.Is(err, refusal.NoApproval) {
				t.Fatalf("gate: %v", err)
			}
			rs := r.replies("Not recorded:")
			switch {
			case tc.reply == "" && len(rs) != 0:
				t.Fatalf("replies %q, want none", rs)
			case tc.reply != "" && (len(rs) != 1 || !strings.Contains(rs[0], tc.reply) || !strings.Contains(rs[0], fmt.Sprintf("(review %d)", rv.ID))):
				t.Fatalf("replies %q, want one saying %q", rs, tc.reply)
			}
			if tc.log != "" && !strings.Contains(r.log.String(), tc.log) {
				t.Errorf("the log does not say %q:\n%s", tc.log, r.log)
			}
		})
	}
}

// A review recorded (here by its webhook delivery) and dismissed later
// stays recorded, as dismissing does not withdraw an answer; a restarted
// bridge reading it dismissed neither records it again nor replies that
// it does not count.
func TestPolledReviewDismissedAfterItWasRecorded(t *testing.T) {
	r := newRig(t, 1, 42)
	rv := r.addReview("alice", bridgetest.GitHubUserID("alice"), "approved", "/approve "+r.w.FP)
	if got := deliver(r.hook(r.poller(t)), r.reviewDelivery(rv)); got.code != http.StatusOK || !strings.HasPrefix(got.body, "recorded") {
		t.Fatalf("delivery: %+v", got)
	}
	r.gh.DismissReview(42, rv.ID)
	if n := poll(t, r.poller(t)); n.Recorded != 0 || n.Refused != 0 || n.Ignored != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	if rs := r.replies("Not recorded:"); len(rs) != 0 {
		t.Fatalf("replies %q", rs)
	}
	if n := len(r.w.Answers(t)); n != 1 || r.acks() != 1 {
		t.Fatalf("%d answers, %d acknowledgements, want 1 and 1", n, r.acks())
	}
}

// Polling an unchanged decision pull request costs two requests, both
// answered 304 (the comments since the newest read, the reviews), which
// GitHub does not count, and no GraphQL query: a review is looked up in
// GraphQL once, before it is first judged.
func TestPollingReviewsIsConditional(t *testing.T) {
	r := newRig(t, 1, 42)
	r.addReview("alice", bridgetest.GitHubUserID("alice"), "approved", "/approve "+r.w.FP)
	r.addReview("Bob", bridgetest.GitHubUserID("bob"), "approved", "LGTM")
	p := r.poller(t)
	if n := poll(t, p); n.Recorded != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	if st := r.gh.Stats(); st.GraphQL != 1 || st.GraphQLIDs != 1 {
		t.Fatalf("%d GraphQL queries for %d reviews, want 1 for the 1 carrying a command", st.GraphQL, st.GraphQLIDs)
	}
	poll(t, p) // the acknowledgement is new to the comment listing
	poll(t, p)
	before, remaining := r.gh.Stats(), r.gh.RateRemaining()
	for i := 0; i < 20; i++ {
		if n := poll(t, p); n.NotModified != 2 || n.Recorded+n.Refused+n.Ignored+n.Duplicates != 0 {
			t.Fatalf("poll %d of an unchanged pull request: %+v", i, n)
		}
	}
	st := r.gh.Stats()
	if st.Requests-before.Requests != 40 || st.ReviewsNotModified-before.ReviewsNotModified != 20 ||
		st.ReviewLists != before.ReviewLists || st.GraphQL != before.GraphQL {
		t.Fatalf("20 polls of an unchanged pull request: %d requests, %d review listings, %d 304s, %d GraphQL queries; want 40, 0, 20, 0",
			st.Requests-before.Requests, st.ReviewLists-before.ReviewLists, st.ReviewsNotModified-before.ReviewsNotModified, st.GraphQL-before.GraphQL)
	}
	if got := r.gh.RateRemaining(); got != remaining {
		t.Errorf("304s cost %d of the rate limit", remaining-got)
	}
	// A new review changes the listing: read, looked up, recorded.
	r.addReview("Bob", bridgetest.GitHubUserID("bob"), "changes_requested", "/deny "+r.w.FP+" not today")
	if n := poll(t, p); n.Recorded != 1 {
		t.Fatalf("poll after a new review: %+v\n%s", n, r.log)
	}
	if st := r.gh.Stats(); st.GraphQLIDs-before.GraphQLIDs != 1 {
		t.Errorf("GraphQL was asked about %d reviews, want the new one only", st.GraphQLIDs-before.GraphQLIDs)
	}
	if err := r.w.Gate(t); !refusal.Is(err, refusal.Vetoed) {
		t.Fatalf("gate: %v", err)
	}
}

// Reviews past the first page are read: a listing longer than a page
// costs a request per page each poll (its ETag would stand for the first
// page only), and a command on the second page is found.
func TestPolledReviewsAcrossPages(t *testing.T) {
	r := newRig(t, 1, 42)
	for i := 0; i < 150; i++ {
		r.addReview("someone", bridgetest.GitHubUserID("someone"), "commented", "nit")
	}
	p := r.poller(t)
	poll(t, p)
	before := r.gh.Stats()
	poll(t, p)
	if st := r.gh.Stats(); st.ReviewLists-before.ReviewLists != 2 || st.GraphQL != 0 {
		t.Fatalf("a poll of 150 reviews made %d listings and %d GraphQL queries, want 2 and 0", st.ReviewLists-before.ReviewLists, st.GraphQL)
	}
	r.addReview("alice", bridgetest.GitHubUserID("alice"), "approved", "/approve "+r.w.FP)
	if n := poll(t, p); n.Recorded != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
}

// When GitHub cannot say whether a review was edited, the review is not
// judged (it might have been), and not forgotten: the next poll reads it
// again and records it.
func TestReviewNotCheckedIsJudgedLater(t *testing.T) {
	r := newRig(t, 1, 42)
	r.addReview("alice", bridgetest.GitHubUserID("alice"), "approved", "/approve "+r.w.FP)
	r.gh.FailGraphQL(1)
	p := r.poller(t)
	n, err := p.PollOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "GraphQL") || n.Recorded != 0 || len(r.w.Answers(t)) != 0 {
		t.Fatalf("poll with GraphQL failing: %+v, %v", n, err)
	}
	if n := poll(t, p); n.Recorded != 1 {
		t.Fatalf("the next poll: %+v\n%s", n, r.log)
	}
}

// A review another judgement holds (a webhook delivery in flight) is
// skipped; if that judgement does not settle it (its answer could not be
// stored), the next poll reads the reviews again rather than take a 304
// for "nothing to do", and records it.
func TestReviewHeldElsewhereIsReadAgain(t *testing.T) {
	r := newRig(t, 1, 42)
	rv := r.addReview("alice", bridgetest.GitHubUserID("alice"), "approved", "/approve "+r.w.FP)
	p := r.poller(t)
	release := p.Hold(rv.ID)
	if n := poll(t, p); n.Recorded != 0 {
		t.Fatalf("poll while held: %+v", n)
	}
	release()
	if n := poll(t, p); n.Recorded != 1 {
		t.Fatalf("poll after the other judgement failed: %+v\n%s", n, r.log)
	}
}

// A restarted bridge that read its reply to a refused review in one poll
// and judges the review in a later one (the review's check failed in
// between) does not reply again.
func TestRefusedReviewRepliedOnceAcrossPolls(t *testing.T) {
	r := newRig(t, 1, 42)
	r.addReview("alice", bridgetest.GitHubUserID("alice"), "approved", "/deny "+r.w.FP)
	if n := poll(t, r.poller(t)); n.Refused != 1 || len(r.replies("Not recorded:")) != 1 {
		t.Fatalf("poll: %+v, replies %q", n, r.replies("Not recorded:"))
	}
	// A later comment, so that the restarted bridge's next comment listing
	// (since the newest it read) no longer holds the reply.
	r.gh.AddComment(42, "someone", "+1", time.Now().Add(time.Minute), false)
	p := r.poller(t)
	r.gh.FailGraphQL(1)
	if _, err := p.PollOnce(context.Background()); err == nil {
		t.Fatal("the poll with GraphQL failing did not fail")
	}
	if n := poll(t, p); n.Refused != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	if rs := r.replies("Not recorded:"); len(rs) != 1 {
		t.Fatalf("%d replies to one refused review, want 1", len(rs))
	}
}
