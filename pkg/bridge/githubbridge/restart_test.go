package githubbridge_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/bridge/githubbridge"
)

// clockRig is a rig whose bridges read the time from the returned clock,
// on a certainty record that lives three hours: a test moves the bridge's
// clock past an answer's lifetime while the decision stays open.
func clockRig(t *testing.T, pr int) (*rig, *time.Time) {
	t.Helper()
	w := bridgetest.New(t, 1)
	w.Record = w.FileFor(t, "smith", 3*time.Hour)
	now := time.Now()
	w.Now = func() time.Time { return now }
	return rigOn(t, w, pr), &now
}

// A way a bridge reads a command: a comment or a review, by a poll or by
// its webhook delivery.
type reader struct {
	name         string
	review, hook bool
}

var readers = []reader{
	{name: "a comment, polled"},
	{name: "a comment, delivered", hook: true},
	{name: "a review, polled", review: true},
	{name: "a review, delivered", review: true, hook: true},
}

// command adds alice's approval to the decision, as a comment or a review,
// and returns a maker of its webhook delivery (a new delivery id each
// time).
func (r *rig) command(review bool) func() *http.Request {
	body := "/approve " + r.w.FP
	alice := bridgetest.GitHubUserID("alice")
	if review {
		rv := r.addReview("alice", alice, "approved", body)
		return func() *http.Request { return r.reviewDelivery(rv) }
	}
	payload := r.commentPayload("created", "alice", alice, body)
	return func() *http.Request {
		return bridgetest.GitHubWebhook("/github/webhook", hookSecret, "issue_comment", newDelivery(), payload)
	}
}

// read has the bridge of poller p read the command the way rd says, and
// returns the outcome: recorded, already recorded, refused, ignored or
// already judged.
func (r *rig) read(t *testing.T, p *githubbridge.Poller, rd reader, delivery func() *http.Request) string {
	t.Helper()
	if rd.hook {
		got := deliver(r.hook(p), delivery())
		out, _, ok := strings.Cut(got.body, ":")
		if got.code != http.StatusOK || !ok {
			t.Fatalf("delivery: %+v", got)
		}
		return out
	}
	n := poll(t, p)
	outs := map[string]int{"recorded": n.Recorded, "already recorded": n.Duplicates, "refused": n.Refused, "ignored": n.Ignored}
	for out, k := range outs {
		if k == 1 && n.Recorded+n.Duplicates+n.Refused+n.Ignored == 1 {
			return out
		}
	}
	t.Fatalf("poll: %+v", n)
	return ""
}

// A command recorded before a restart is read again by the restarted
// bridge (its first poll lists every command still on the decision; a
// delivery may be redelivered) after an answer's lifetime, while the
// decision is still open: it is already recorded, and is not refused as
// too old, which would tell the approver it was "Not recorded".
func TestRecordedCommandReadAgainAfterItsLifetime(t *testing.T) {
	for _, rd := range readers {
		t.Run(rd.name, func(t *testing.T) {
			pr := 0
			if rd.review {
				pr = 42
			}
			r, now := clockRig(t, pr)
			delivery := r.command(rd.review)
			if got := r.read(t, r.poller(t), rd, delivery); got != "recorded" {
				t.Fatalf("first read: %s\n%s", got, r.log)
			}
			*now = now.Add(approval.DefaultAnswerTTL + time.Minute)
			if got := r.read(t, r.poller(t), rd, delivery); got != "already recorded" {
				t.Fatalf("read again after a restart, past the answer's lifetime: %s\n%s", got, r.log)
			}
			if rs := r.replies("Not recorded:"); len(rs) != 0 {
				t.Fatalf("replies %q to a recorded command", rs)
			}
			if n := len(r.w.Answers(t)); n != 1 || r.acks() != 1 {
				t.Fatalf("%d answers, %d acknowledgements, want 1 and 1", n, r.acks())
			}
		})
	}
}

// A command no bridge recorded (it was down) that is older than an answer
// lives when a bridge first reads it is still refused, once, with a reply
// saying why.
func TestUnrecordedCommandFirstReadAfterItsLifetime(t *testing.T) {
	for _, rd := range readers {
		t.Run(rd.name, func(t *testing.T) {
			pr := 0
			if rd.review {
				pr = 42
			}
			r, now := clockRig(t, pr)
			delivery := r.command(rd.review)
			*now = now.Add(approval.DefaultAnswerTTL + time.Minute)
			p := r.poller(t)
			if got := r.read(t, p, rd, delivery); got != "refused" {
				t.Fatalf("first read, past the answer's lifetime: %s\n%s", got, r.log)
			}
			if n := poll(t, p); n.Refused != 0 {
				t.Fatalf("refused again: %+v", n)
			}
			rs := r.replies("Not recorded:")
			if len(rs) != 1 || !strings.Contains(rs[0], "older than an answer lives") {
				t.Fatalf("replies %q, want one saying the command is too old", rs)
			}
			if n := len(r.w.Answers(t)); n != 0 {
				t.Fatalf("%d answers", n)
			}
		})
	}
}
