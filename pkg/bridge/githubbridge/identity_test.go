package githubbridge_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// replies returns the bot's comments on the decision issue that start
// with prefix.
func (r *rig) replies(prefix string) []string {
	var out []string
	for _, c := range r.gh.Issue(r.post.GitHubIssue).Comments {
		if c.Login == "prod-write-bot" && strings.HasPrefix(c.Body, prefix) {
			out = append(out, c.Body)
		}
	}
	return out
}

// An author is mapped by GitHub's numeric user id: the answer names it,
// and the login it came with.
func TestAnswerNamesTheUserID(t *testing.T) {
	r := newRig(t, 1, 0)
	r.comment("alice", "/approve "+r.w.FP)
	if n := poll(t, r.poller(t)); n.Recorded != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	a := r.w.Answers(t)
	if len(a) != 1 || a[0].Channel.GitHubUserID != bridgetest.GitHubUserID("alice") || a[0].Channel.GitHubLogin != "alice" {
		t.Fatalf("answers %+v", a)
	}
}

// A login that is a principal's, on an account whose numeric id is not
// that principal's github_id (the login was renamed away and registered
// again by someone else), is refused: nothing is recorded, the gate stays
// closed, and a reply says why, once, even after a restart.
func TestRenamedLoginIsRefused(t *testing.T) {
	r := newRig(t, 1, 0)
	r.gh.AddCommentBy(r.post.GitHubIssue, "alice", 4242, "/approve "+r.w.FP, time.Now().Add(-time.Minute), false)
	if n := poll(t, r.poller(t)); n.Recorded != 0 || n.Refused != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	if got := len(r.w.Answers(t)); got != 0 {
		t.Fatalf("%d answers recorded for a re-registered login", got)
	}
	if err := r.w.Gate(t); !refusal.Is(err, refusal.NoApproval) {
		t.Fatalf("gate: %v", err)
	}
	replies := r.replies("Not recorded:")
	if len(replies) != 1 || !strings.Contains(replies[0], "a renamed or re-registered login never counts") ||
		!strings.Contains(replies[0], "(principal_unknown)") || !strings.Contains(replies[0], "@alice") {
		t.Fatalf("replies %q", replies)
	}
	poll(t, r.poller(t)) // a restarted bridge
	if got := len(r.replies("Not recorded:")); got != 1 {
		t.Errorf("%d replies after a restart, want 1", got)
	}
}

// A principal's account renamed: the id is the principal's, the login is
// not the one trust.toml names. Refused until trust.toml says so.
func TestRenamedAccountIsRefused(t *testing.T) {
	r := newRig(t, 1, 0)
	r.gh.AddCommentBy(r.post.GitHubIssue, "alice-renamed", bridgetest.GitHubUserID("alice"), "/approve "+r.w.FP, time.Now().Add(-time.Minute), false)
	if n := poll(t, r.poller(t)); n.Recorded != 0 || n.Refused != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	replies := r.replies("Not recorded:")
	if len(replies) != 1 || !strings.Contains(replies[0], "update github in trust.toml") {
		t.Fatalf("replies %q", replies)
	}
	// Another principal's login on alice's account is no better.
	r2 := newRig(t, 1, 0)
	r2.gh.AddCommentBy(r2.post.GitHubIssue, "bob", bridgetest.GitHubUserID("alice"), "/approve "+r2.w.FP, time.Now().Add(-time.Minute), false)
	if n := poll(t, r2.poller(t)); n.Recorded != 0 {
		t.Fatalf("poll: %+v\n%s", n, r2.log)
	}
}

// Someone the trust policy does not know gets no reply (the bot cannot be
// made to answer strangers), only a log line.
func TestStrangerGetsNoReply(t *testing.T) {
	r := newRig(t, 1, 0)
	r.comment("mallory", "/approve "+r.w.FP)
	if n := poll(t, r.poller(t)); n.Refused != 1 {
		t.Fatalf("poll: %+v", n)
	}
	if got := r.replies(""); len(got) != 0 {
		t.Fatalf("the bot answered a stranger: %q", got)
	}
	if !strings.Contains(r.log.String(), "maps to no principal") {
		t.Errorf("log:\n%s", r.log)
	}
}

// The marker that tells a restarted bridge it already replied to a refused
// command is signed with the bridge's key: a marker anyone else writes (for
// a command the bridge has not answered yet, or with the signature of
// another command) silences nothing, and the reply is still made once.
func TestForgedRefusalMarkerSilencesNothing(t *testing.T) {
	r := newRig(t, 1, 0)
	cmd := r.gh.AddCommentBy(r.post.GitHubIssue, "alice", 4242, "/approve "+r.w.FP, time.Now().Add(-2*time.Minute), false)
	// A genuine marker of the bridge's, but for another command id.
	other := r.poller(t)
	genuineOther := fmt.Sprintf("<!-- prod-write: refused comment %d %s -->", cmd+1, r.w.Attestor(t).Mark(other.RefusalMark("comment", cmd+1)))
	for _, body := range []string{
		fmt.Sprintf("<!-- prod-write: refused comment %d -->", cmd),          // the old, unsigned form
		fmt.Sprintf("<!-- prod-write: refused comment %d AAAA -->", cmd),     // a made-up signature
		strings.Replace(genuineOther, fmt.Sprint(cmd+1), fmt.Sprint(cmd), 1), // another command's signature
	} {
		r.gh.AddComment(r.post.GitHubIssue, "mallory", body, time.Now().Add(-time.Minute), false)
	}
	if n := poll(t, r.poller(t)); n.Refused != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	if got := len(r.replies("Not recorded:")); got != 1 {
		t.Fatalf("%d replies to the refused command with forged markers beside it, want 1", got)
	}
	poll(t, r.poller(t)) // a restarted bridge honours its own marker
	if got := len(r.replies("Not recorded:")); got != 1 {
		t.Errorf("%d replies after a restart, want 1", got)
	}
}
