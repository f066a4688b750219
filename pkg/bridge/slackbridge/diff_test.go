package slackbridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/bridge/slackbridge"
)

// The posted message shows approvers what they approve: the diff of the
// file the plan replaces in place, and that the approval is single use and
// for how long; all as plain text.
func TestPostedMessageShowsTheDiffAndTheUse(t *testing.T) {
	w := bridgetest.NewWithFile(t, 2)
	fake := bridgetest.NewFakeSlack(botToken)
	t.Cleanup(fake.Stop)
	poster := &slackbridge.Poster{API: slack.New(botToken, slack.OptionAPIURL(fake.APIURL())), Channel: "#prod-decisions"}
	v, err := bridge.Describe(w.Source(), w.FP, w.Record, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := bridge.Notify(context.Background(), w.Ledger, []bridge.Poster{poster}, v); len(errs) > 0 {
		t.Fatal(errs)
	}
	posted := fake.Calls("chat.postMessage")
	if len(posted) != 1 {
		t.Fatalf("%d messages", len(posted))
	}
	var text []string
	for _, b := range posted[0].Blocks().BlockSet {
		if s, ok := b.(*slack.SectionBlock); ok && s.Text != nil {
			if s.Text.Type != slack.PlainTextType {
				t.Errorf("a section of type %s", s.Text.Type)
			}
			text = append(text, s.Text.Text)
		}
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{
		"File config replaces " + w.Current,
		"--- " + w.Current + " (current)",
		"@@ -1,3 +1,3 @@\n-listen = 80\n+listen = 8080\n workers = 4",
		"Single use: 2 approvals from different approvers let exactly one run",
		"Lifetime: an approval given here counts for 1h from when it is given, and never after the certainty record expires at",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the message does not show %q:\n%s", want, all)
		}
	}
	// The approve button's confirmation says it too.
	if blocks := posted[0].Values.Get("blocks"); !strings.Contains(blocks, "lives 1h; one run spends it") {
		t.Errorf("the confirmation does not state the lifetime and the single use")
	}
}
