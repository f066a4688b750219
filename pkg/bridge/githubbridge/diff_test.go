package githubbridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/bridge/githubbridge"
)

// The decision issue shows approvers the diff of the file the plan
// replaces in place, fenced, and that the approval is single use and for
// how long.
func TestDecisionIssueShowsTheDiffAndTheUse(t *testing.T) {
	w := bridgetest.NewWithFile(t, 1)
	gh := bridgetest.NewFakeGitHub("acme", "prod-decisions", token)
	t.Cleanup(gh.Close)
	client, err := githubbridge.NewClient(gh.APIURL(), bridgetest.Secret(token), nil)
	if err != nil {
		t.Fatal(err)
	}
	poster := &githubbridge.Poster{Client: client, Owner: "acme", Repo: "prod-decisions"}
	v, err := bridge.Describe(w.Source(), w.FP, w.Record, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	posts, errs := bridge.Notify(context.Background(), w.Ledger, []bridge.Poster{poster}, v)
	if len(errs) > 0 || len(posts) != 1 {
		t.Fatal(errs)
	}
	body := gh.Issue(posts[0].GitHubIssue).Body
	for _, want := range []string{
		"### What file config changes\n\n```text\nFile config replaces " + w.Current,
		"@@ -1,3 +1,3 @@\n-listen = 80\n+listen = 8080\n workers = 4",
		"### What an approval allows\n\n```text\nSingle use: 1 approval lets exactly one run",
		"counts for 1h from when it is given, and never after the certainty record expires at",
		"An approval lives 1h from its comment.",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the issue does not show %q:\n%s", want, body)
		}
	}
}
