package slackbridge_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/bridge/slackbridge"
)

// A decision message updated to say the gate is open is updated again
// when the approval stops holding before the plan ran (here: it expires):
// it shows the gate closed, and why, with its buttons, and a reply in its
// thread mentions the approvers asked.
func TestMessageUpdatedWhenTheApprovalStopsHolding(t *testing.T) {
	w := bridgetest.New(t, 1)
	fs := bridgetest.NewFakeSlack(botToken)
	t.Cleanup(fs.Stop)
	poster := &slackbridge.Poster{API: slack.New(botToken, slack.OptionAPIURL(fs.APIURL())), Channel: "#prod-decisions"}
	now := time.Now().UTC()
	v, err := bridge.Describe(w.Source(), w.FP, w.Record, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := bridge.Notify(context.Background(), w.Ledger, []bridge.Poster{poster}, v); len(errs) > 0 {
		t.Fatal(errs)
	}
	f := &bridge.FollowUps{Source: w.Source(), Ledger: w.Ledger, Events: &bridge.Events{Dir: filepath.Join(w.Dir, "state", "bridge", "events")},
		Posters: []bridge.Poster{poster}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }}
	ctx := context.Background()

	w.Put(t, bridgetest.Sign(t, "alice", approval.TypeTrinity, approval.Answer{Fingerprint: w.FP, Record: w.Record, Answer: approval.Approve,
		Approver: "alice", Issued: now.Add(-time.Minute), Expires: now.Add(10 * time.Minute)}))
	f.Check(ctx)
	updates := fs.Calls("chat.update")
	if len(updates) != 1 || !strings.Contains(updates[0].Values.Get("blocks"), "Gate: open") {
		t.Fatalf("approved: %d updates", len(updates))
	}

	now = now.Add(20 * time.Minute)
	f.Check(ctx)
	f.Check(ctx)
	updates, replies := fs.Calls("chat.update"), fs.Calls("chat.postMessage")
	if len(updates) != 2 || len(replies) != 3 {
		t.Fatalf("the approval expired: %d updates, %d messages, want 2 and 3", len(updates), len(replies))
	}
	if blocks := updates[1].Values.Get("blocks"); strings.Contains(blocks, "Gate: open") || !strings.Contains(blocks, "Gate: closed (evidence_expired)") {
		t.Errorf("the message is updated to %s", blocks)
	}
	if _, _, ok := bridgetest.FindButton(updates[1].Blocks(), slackbridge.ActionApprove); !ok {
		t.Error("the reopened message has no Approve button")
	}
	if text := replies[2].Values.Get("text"); replies[2].Values.Get("thread_ts") == "" || !strings.HasPrefix(text, "<@UALICE> <@UBOB> No longer approved") || !strings.Contains(text, "(evidence_expired)") {
		t.Errorf("the reply in the thread says %q", text)
	}
}
