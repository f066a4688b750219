package githubbridge_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/bridge/githubbridge"
	"github.com/prod-write/prod-write/pkg/refusal"
)

const hookSecret = "webhook-secret-0123456789"

// hook is the rig's webhook endpoint, sharing the poller p.
func (r *rig) hook(p *githubbridge.Poller) *githubbridge.Webhook {
	return &githubbridge.Webhook{Secret: bridgetest.Secret(hookSecret), Poller: p}
}

type delivered struct {
	code int
	body string
}

func deliver(h http.Handler, req *http.Request) delivered {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return delivered{w.Code, w.Body.String()}
}

var deliveries atomic.Int64

func newDelivery() string {
	return fmt.Sprintf("72d3162e-cc78-11e3-81ab-%012d", deliveries.Add(1))
}

// commentPayload adds a comment by login (with user id id) to the
// decision issue and returns its issue_comment webhook payload.
func (r *rig) commentPayload(action, login string, id int64, body string) []byte {
	now := time.Now().UTC().Truncate(time.Second)
	cid := r.gh.AddCommentBy(r.post.GitHubIssue, login, id, body, now, false)
	return r.gh.IssueCommentPayload(action, r.post.GitHubIssue, r.post.GitHubPR,
		bridgetest.FakeComment{ID: cid, Login: login, UserID: id, Body: body, CreatedAt: now, UpdatedAt: now})
}

func (r *rig) acks() int { return len(r.replies("Recorded:")) }

// A signed issue_comment delivery is the real-time path: recorded and
// acknowledged at once, with no poll.
func TestWebhookRecordsAComment(t *testing.T) {
	r := newRig(t, 1, 0)
	h := r.hook(r.poller(t))
	payload := r.commentPayload("created", "alice", bridgetest.GitHubUserID("alice"), "/approve "+r.w.FP+"\nlooks right")
	got := deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", newDelivery(), payload))
	if got.code != http.StatusOK || !strings.HasPrefix(got.body, "recorded: comment ") {
		t.Fatalf("delivery: %+v\n%s", got, r.log)
	}
	a := r.w.Answers(t)
	if len(a) != 1 || a[0].Approver != "alice" || a[0].Reason != "looks right" || a[0].Channel.GitHubUserID != bridgetest.GitHubUserID("alice") {
		t.Fatalf("answers %+v", a)
	}
	if err := r.w.Gate(t); err != nil {
		t.Fatalf("gate: %v", err)
	}
	if r.acks() != 1 {
		t.Fatalf("%d acknowledgements", r.acks())
	}
}

// A delivery whose signature is missing, malformed or made with another
// secret is 401, and nothing of it is recorded, even when its payload is
// a valid approval.
func TestWebhookBadSignature(t *testing.T) {
	r := newRig(t, 1, 0)
	h := r.hook(r.poller(t))
	payload := r.commentPayload("created", "alice", bridgetest.GitHubUserID("alice"), "/approve "+r.w.FP)
	for name, sig := range map[string]string{
		"missing":        "",
		"another secret": bridgetest.SignGitHubWebhook("not-the-secret", payload),
		"sha1":           "sha1=" + strings.TrimPrefix(bridgetest.SignGitHubWebhook(hookSecret, payload), "sha256=")[:40],
		"not hex":        "sha256=zz",
		"truncated":      bridgetest.SignGitHubWebhook(hookSecret, payload)[:40],
		"other body":     bridgetest.SignGitHubWebhook(hookSecret, append(payload, ' ')),
		"upper case":     "SHA256=" + strings.TrimPrefix(bridgetest.SignGitHubWebhook(hookSecret, payload), "sha256="),
		// Right, under the right secret, but not SHA-256: go-github would
		// take them, a downgrade would send them.
		"valid sha1":   "sha1=" + hmacHex(sha1.New, hookSecret, payload),
		"valid sha512": "sha512=" + hmacHex(sha512.New, hookSecret, payload),
	} {
		req := bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", newDelivery(), payload)
		req.Header.Set("X-Hub-Signature-256", sig)
		if got := deliver(h, req); got.code != http.StatusUnauthorized {
			t.Errorf("%s signature: %+v", name, got)
		}
	}
	// An empty secret verifies nothing.
	empty := &githubbridge.Webhook{Poller: r.poller(t)}
	if got := deliver(empty, bridgetest.GitHubWebhook("/github/webhook", "", "issue_comment", newDelivery(), payload)); got.code != http.StatusUnauthorized {
		t.Errorf("empty secret: %+v", got)
	}
	if n := len(r.w.Answers(t)); n != 0 || r.acks() != 0 {
		t.Fatalf("%d answers, %d acknowledgements after bad signatures", n, r.acks())
	}
	if err := r.w.Gate(t); !refusal.Is(err, refusal.NoApproval) {
		t.Fatalf("gate: %v", err)
	}
}

// The same delivery again (GitHub's "Redeliver", or a captured request
// replayed: deliveries carry no timestamp) changes nothing: one answer,
// one acknowledgement. So does the same comment delivered under another
// delivery id, to a restarted bridge, or read again by the poller.
func TestWebhookReplayIsIdempotent(t *testing.T) {
	r := newRig(t, 1, 0)
	p := r.poller(t)
	h := r.hook(p)
	payload := r.commentPayload("created", "alice", bridgetest.GitHubUserID("alice"), "/approve "+r.w.FP)
	id := newDelivery()
	first := deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", id, payload))
	again := deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", id, payload))
	if first.code != http.StatusOK || again.code != http.StatusOK || !strings.Contains(again.body, "already handled") {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	other := deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", newDelivery(), payload))
	if other.code != http.StatusOK || !strings.HasPrefix(other.body, "already judged") {
		t.Fatalf("another delivery id: %+v", other)
	}
	restarted := r.hook(r.poller(t))
	if got := deliver(restarted, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", id, payload)); got.code != http.StatusOK || !strings.HasPrefix(got.body, "already recorded") {
		t.Fatalf("after a restart: %+v", got)
	}
	if n := poll(t, p); n.Recorded != 0 {
		t.Fatalf("the poller recorded it again: %+v", n)
	}
	if n := len(r.w.Answers(t)); n != 1 || r.acks() != 1 {
		t.Fatalf("%d answers, %d acknowledgements, want 1 and 1", n, r.acks())
	}
}

// What is not a decision's command is 204 and records nothing: other
// events (ping, push), other actions, another repository, a comment that
// is no command; an edited comment never counts.
func TestWebhookIgnores(t *testing.T) {
	r := newRig(t, 1, 0)
	h := r.hook(r.poller(t))
	alice := bridgetest.GitHubUserID("alice")
	cmd := "/approve " + r.w.FP
	other := bridgetest.NewFakeGitHub("acme", "elsewhere", token)
	defer other.Close()
	for _, tc := range []struct {
		name, event string
		payload     []byte
		code        int
	}{
		{"ping", "ping", []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`), http.StatusNoContent},
		{"push", "push", []byte(`{"ref":"refs/heads/main"}`), http.StatusNoContent},
		{"deleted", "issue_comment", r.commentPayload("deleted", "alice", alice, cmd), http.StatusNoContent},
		{"not a command", "issue_comment", r.commentPayload("created", "alice", alice, "lgtm"), http.StatusNoContent},
		{"another repository", "issue_comment", other.IssueCommentPayload("created", r.post.GitHubIssue, false,
			bridgetest.FakeComment{ID: 777, Login: "alice", UserID: alice, Body: cmd, CreatedAt: time.Now(), UpdatedAt: time.Now()}), http.StatusNoContent},
		{"another issue", "issue_comment", r.gh.IssueCommentPayload("created", 99, false,
			bridgetest.FakeComment{ID: 778, Login: "alice", UserID: alice, Body: cmd, CreatedAt: time.Now(), UpdatedAt: time.Now()}), http.StatusNoContent},
		{"edited", "issue_comment", r.commentPayload("edited", "alice", alice, cmd), http.StatusOK},
		{"a review on an issue", "pull_request_review", r.gh.ReviewPayload("submitted", r.post.GitHubIssue,
			bridgetest.FakeReview{ID: 779, Login: "alice", UserID: alice, Body: cmd, State: "approved", SubmittedAt: time.Now()}), http.StatusOK},
	} {
		got := deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, tc.event, newDelivery(), tc.payload))
		if got.code != tc.code || (tc.code == http.StatusOK && !strings.HasPrefix(got.body, "ignored")) {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
	if n := len(r.w.Answers(t)); n != 0 {
		t.Fatalf("%d answers", n)
	}
}

// The request itself: POST only, bounded, JSON only.
func TestWebhookRequest(t *testing.T) {
	r := newRig(t, 1, 0)
	h := r.hook(r.poller(t))
	if got := deliver(h, httptest.NewRequest(http.MethodGet, "/github/webhook", nil)); got.code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %+v", got)
	}
	big := bytes.Repeat([]byte("x"), githubbridge.MaxWebhookBody+1)
	if got := deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", newDelivery(), big)); got.code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the bound: %d", got.code)
	}
	payload := r.commentPayload("created", "alice", bridgetest.GitHubUserID("alice"), "/approve "+r.w.FP)
	req := bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", newDelivery(), payload)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if got := deliver(h, req); got.code != http.StatusUnsupportedMediaType {
		t.Errorf("form-encoded: %+v", got)
	}
	if n := len(r.w.Answers(t)); n != 0 {
		t.Fatalf("%d answers", n)
	}
}

// The webhook judges identity as the poller does: a renamed or
// re-registered login is refused, with a reply saying why.
func TestWebhookRefusesARenamedLogin(t *testing.T) {
	r := newRig(t, 1, 0)
	h := r.hook(r.poller(t))
	payload := r.commentPayload("created", "bob", 4242, "/approve "+r.w.FP)
	got := deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", newDelivery(), payload))
	if got.code != http.StatusOK || !strings.HasPrefix(got.body, "refused") {
		t.Fatalf("delivery: %+v", got)
	}
	if n := len(r.w.Answers(t)); n != 0 {
		t.Fatalf("%d answers", n)
	}
	if rs := r.replies("Not recorded:"); len(rs) != 1 || !strings.Contains(rs[0], "renamed or re-registered") {
		t.Fatalf("replies %q", rs)
	}
}

func (r *rig) review(login string, id int64, state, body string) *http.Request {
	rv := bridgetest.FakeReview{ID: r.gh.NextID(), Login: login, UserID: id, State: state, Body: body, SubmittedAt: time.Now()}
	return bridgetest.GitHubWebhook("/github/webhook", hookSecret, "pull_request_review", newDelivery(), r.gh.ReviewPayload("submitted", r.post.GitHubIssue, rv))
}

// On a decision pull request, a review by a mapped approver whose first
// line names the fingerprint answers it: Approve with /approve, Request
// changes with /deny (a veto). The answer names the review.
func TestPullRequestReviews(t *testing.T) {
	r := newRig(t, 1, 42)
	h := r.hook(r.poller(t))
	got := deliver(h, r.review("alice", bridgetest.GitHubUserID("alice"), "approved", "/approve "+r.w.FP))
	if got.code != http.StatusOK || !strings.HasPrefix(got.body, "recorded: review ") {
		t.Fatalf("approving review: %+v\n%s", got, r.log)
	}
	a := r.w.Answers(t)
	if len(a) != 1 || a[0].Approver != "alice" || a[0].Answer != "approve" || a[0].Channel.GitHubReview == 0 || a[0].Channel.GitHubComment != 0 {
		t.Fatalf("answers %+v", a)
	}
	if err := r.w.Gate(t); err != nil {
		t.Fatalf("gate after the approving review: %v", err)
	}
	if !strings.Contains(strings.Join(r.replies("Recorded:"), ""), "(@alice, review ") {
		t.Errorf("acknowledgement %q", r.replies("Recorded:"))
	}
	got = deliver(h, r.review("Bob", bridgetest.GitHubUserID("bob"), "changes_requested", "/deny "+r.w.FP+" not in the freeze"))
	if got.code != http.StatusOK || !strings.HasPrefix(got.body, "recorded: review ") {
		t.Fatalf("request-changes review: %+v\n%s", got, r.log)
	}
	if err := r.w.Gate(t); !refusal.Is(err, refusal.Vetoed) {
		t.Fatalf("gate after the request-changes review: %v", err)
	}
}

// Reviews that do not count: a plain code review (no command), a state
// that disagrees with the command, a comment-only review, the planner's
// or the filer's review (separation of duties), a renamed login, an
// edited review.
func TestPullRequestReviewsThatDoNotCount(t *testing.T) {
	for _, tc := range []struct {
		name, login string
		id          int64
		state, body string
		out, reply  string
	}{
		{"an approval without the command", "alice", 0, "approved", "LGTM", "", ""},
		{"approve state, deny command", "alice", 0, "approved", "/deny FP", "refused", "state is APPROVED but its first line is /deny"},
		{"request changes, approve command", "alice", 0, "changes_requested", "/approve FP", "refused", "state is CHANGES_REQUESTED but its first line is /approve"},
		{"a comment-only review", "alice", 0, "commented", "/approve FP", "refused", "state is COMMENTED"},
		{"the planner", "agent-gh", 0, "approved", "/approve FP", "refused", "agent planned this"},
		{"the filer", "smith-gh", 0, "approved", "/approve FP", "refused", "smith filed the certainty record"},
		{"a renamed login", "alice", 4242, "approved", "/approve FP", "refused", "renamed or re-registered"},
		{"another fingerprint", "alice", 0, "approved", "/approve sha256:" + strings.Repeat("ab", 32), "ignored", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1, 42)
			h := r.hook(r.poller(t))
			id := tc.id
			if id == 0 {
				id = bridgetest.GitHubUserID(tc.login)
			}
			got := deliver(h, r.review(tc.login, id, tc.state, strings.ReplaceAll(tc.body, "FP", r.w.FP)))
			switch {
			case tc.out == "" && got.code != http.StatusNoContent:
				t.Fatalf("delivery: %+v", got)
			case tc.out != "" && (got.code != http.StatusOK || !strings.HasPrefix(got.body, tc.out)):
				t.Fatalf("delivery: %+v, want %s\n%s", got, tc.out, r.log)
			}
			if n := len(r.w.Answers(t)); n != 0 {
				t.Fatalf("%d answers", n)
			}
			rs := r.replies("Not recorded:")
			if tc.reply != "" && (len(rs) != 1 || !strings.Contains(rs[0], tc.reply)) {
				t.Fatalf("replies %q, want one saying %q", rs, tc.reply)
			}
		})
	}
	// An edited review never counts, and its id is never judged again.
	r := newRig(t, 1, 42)
	h := r.hook(r.poller(t))
	rv := bridgetest.FakeReview{ID: r.gh.NextID(), Login: "alice", UserID: bridgetest.GitHubUserID("alice"), State: "approved", Body: "/approve " + r.w.FP, SubmittedAt: time.Now()}
	deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "pull_request_review", newDelivery(), r.gh.ReviewPayload("edited", 42, rv)))
	deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "pull_request_review", newDelivery(), r.gh.ReviewPayload("submitted", 42, rv)))
	if n := len(r.w.Answers(t)); n != 0 {
		t.Fatalf("%d answers from an edited review", n)
	}
}

// The webhook works behind the bridge's listener as a real server would
// serve it, reading the body from the network.
func TestWebhookOverHTTP(t *testing.T) {
	r := newRig(t, 1, 0)
	mux := http.NewServeMux()
	mux.Handle(githubbridge.WebhookPath, r.hook(r.poller(t)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	payload := r.commentPayload("created", "alice", bridgetest.GitHubUserID("alice"), "/approve "+r.w.FP)
	resp, err := http.DefaultClient.Do(bridgetest.GitHubWebhook(srv.URL+githubbridge.WebhookPath, hookSecret, "issue_comment", newDelivery(), payload))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(r.w.Answers(t)) != 1 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// A command delivered by webhook while the poller reads it is answered
// once: one answer, one acknowledgement.
func TestWebhookAndPollerTogether(t *testing.T) {
	for i := 0; i < 5; i++ {
		r := newRig(t, 1, 0)
		p := r.poller(t)
		h := r.hook(p)
		payload := r.commentPayload("created", "alice", bridgetest.GitHubUserID("alice"), "/approve "+r.w.FP)
		done := make(chan delivered)
		go func() {
			done <- deliver(h, bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", newDelivery(), payload))
		}()
		poll(t, p)
		if got := <-done; got.code != http.StatusOK {
			t.Fatalf("delivery: %+v", got)
		}
		poll(t, p)
		if n := len(r.w.Answers(t)); n != 1 || r.acks() != 1 {
			t.Fatalf("%d answers, %d acknowledgements, want 1 and 1\n%s", n, r.acks(), r.log)
		}
	}
}

func hmacHex(h func() hash.Hash, secret string, body []byte) string {
	m := hmac.New(h, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// GitHub's published test vector (docs.github.com, "Validating webhook
// deliveries"): secret "It's a Secret to Everybody", payload "Hello,
// World!". Its signature passes (the body is then refused as no JSON,
// 415, never 401); the same with one digit changed does not.
func TestWebhookSignatureVector(t *testing.T) {
	r := newRig(t, 1, 0)
	h := &githubbridge.Webhook{Secret: bridgetest.Secret("It's a Secret to Everybody"), Poller: r.poller(t)}
	const sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	for _, tc := range []struct {
		sig  string
		want int
	}{
		{sig, http.StatusUnsupportedMediaType},
		{sig[:len(sig)-1] + "8", http.StatusUnauthorized},
	} {
		req := httptest.NewRequest(http.MethodPost, "/github/webhook", strings.NewReader("Hello, World!"))
		req.Header.Set("X-Hub-Signature-256", tc.sig)
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("X-GitHub-Event", "issue_comment")
		if got := deliver(h, req); got.code != tc.want {
			t.Errorf("signature %s: %+v, want %d", tc.sig, got, tc.want)
		}
	}
}
