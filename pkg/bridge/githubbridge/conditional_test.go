package githubbridge_test

import (
	"strings"
	"testing"
	"time"
)

// Polling an issue with nothing new costs no rate limit: the poller asks
// only for comments updated since the newest it read, and sends the last
// listing's ETag, which GitHub answers 304. A new comment is still found.
func TestPollingIsConditional(t *testing.T) {
	r := newRig(t, 1, 0)
	r.comment("alice", "/approve "+r.w.FP)
	p := r.poller(t)
	if n := poll(t, p); n.Recorded != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	// The acknowledgement is new to the next listing, whose since then
	// moves past it: two more full listings, then nothing changes.
	poll(t, p)
	poll(t, p)
	st := r.gh.Stats()
	if st.Since == "" {
		t.Fatal("the listing sends no since")
	}
	lists, remaining := st.Lists, r.gh.RateRemaining()
	for i := 0; i < 20; i++ {
		if n := poll(t, p); n.NotModified != 1 || n.Recorded+n.Refused+n.Ignored+n.Duplicates != 0 {
			t.Fatalf("poll %d of an unchanged issue: %+v", i, n)
		}
	}
	st = r.gh.Stats()
	if st.Lists != lists || st.NotModified != 20 {
		t.Fatalf("20 polls of an unchanged issue made %d full listings and %d 304s, want 0 and 20", st.Lists-lists, st.NotModified)
	}
	if got := r.gh.RateRemaining(); got != remaining {
		t.Errorf("304s cost %d of the rate limit", remaining-got)
	}
	since, err := time.Parse(time.RFC3339, st.Since)
	if err != nil || time.Since(since) > time.Minute {
		t.Errorf("since %q is not the newest comment's update time", st.Since)
	}

	// A comment made since, even in the same second as the last one read,
	// is found.
	r.gh.AddComment(r.post.GitHubIssue, "bob", "/deny "+r.w.FP+" not today", since, false)
	if n := poll(t, p); n.Recorded != 1 || n.NotModified != 0 {
		t.Fatalf("poll after a new comment: %+v\n%s", n, r.log)
	}
	a := r.w.Answers(t)
	if len(a) != 2 {
		t.Fatalf("%d answers", len(a))
	}
	for _, x := range a {
		if x.Approver == "bob" && (x.Answer != "deny" || x.Reason != "not today") {
			t.Errorf("bob's answer %+v", x)
		}
	}
}

// A listing longer than a page is never answered 304 on its first page's
// ETag alone: a command on a later page is found.
func TestConditionalAcrossPages(t *testing.T) {
	r := newRig(t, 1, 0)
	base := time.Now().Add(-10 * time.Minute)
	for i := 0; i < 150; i++ {
		r.gh.AddComment(r.post.GitHubIssue, "someone", "+1", base, false) // all in one second
	}
	p := r.poller(t)
	poll(t, p) // the whole issue
	poll(t, p) // since the newest: still two pages, the same since from now on
	r.gh.AddComment(r.post.GitHubIssue, "alice", "/approve "+r.w.FP, base, false)
	if n := poll(t, p); n.Recorded != 1 {
		t.Fatalf("poll: %+v\n%s", n, r.log)
	}
	if strings.Contains(r.log.String(), "poll failed") {
		t.Error(r.log)
	}
}
