package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/store"
)

// heard is one follow-up a [recorder] was asked to make.
type heard struct {
	post bridge.Post
	view *bridge.View
	n    bridge.Notice
}

// recorder is a Slack-kind [bridge.Follower] that remembers what it was
// asked to say, instead of saying it.
type recorder struct{ heard []heard }

func (r *recorder) Kind() string { return bridge.KindSlack }
func (r *recorder) Post(context.Context, *bridge.View) (bridge.Post, error) {
	return bridge.Post{}, errors.New("not posting")
}
func (r *recorder) Withdrawn(context.Context, bridge.Post, *bridge.View) error { return nil }
func (r *recorder) FollowUp(_ context.Context, p bridge.Post, v *bridge.View, n bridge.Notice) error {
	r.heard = append(r.heard, heard{p, v, n})
	return nil
}
func (r *recorder) Escalate(context.Context, bridge.Post, *bridge.View, string, bridge.Notice) (*bridge.Post, error) {
	return nil, nil
}

// take returns what was said since the last take.
func (r *recorder) take() []heard {
	out := r.heard
	r.heard = nil
	return out
}

// followed is a world whose decision (on its record) was posted to Slack,
// with the follow-ups of bridge serve over it, their clock at *now.
func followed(t *testing.T, w *bridgetest.World, now *time.Time) (*bridge.FollowUps, *recorder) {
	t.Helper()
	if err := w.Ledger.Add(bridge.Post{Kind: bridge.KindSlack, Fingerprint: w.FP, Record: w.Record, Posted: *now, SlackChannel: "C1", SlackTS: "1.1"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	return &bridge.FollowUps{Source: w.Source(), Ledger: w.Ledger, Events: &bridge.Events{Dir: filepath.Join(w.Dir, "state", "bridge", "events")},
		Posters: []bridge.Poster{rec}, Settings: bridge.Settings{TTL: time.Hour}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return *now }}, rec
}

// approve stores alice's approval of the world's record, given on the CLI
// at issued and counting until expires.
func approve(t *testing.T, w *bridgetest.World, issued, expires time.Time) {
	t.Helper()
	approveRecord(t, w, w.Record, issued, expires)
}

// approveRecord is [approve] of the world's plan's record.
func approveRecord(t *testing.T, w *bridgetest.World, record string, issued, expires time.Time) {
	t.Helper()
	w.Put(t, bridgetest.Sign(t, "alice", approval.TypeTrinity, approval.Answer{Fingerprint: w.FP, Record: record, Answer: approval.Approve,
		Approver: "alice", Issued: issued, Expires: expires}))
}

// A decision the follow-ups announced as approved, and whose gate closes
// again before the plan ran (here: the breaker's earlier break-glass run is
// not reviewed, so run refuses break_glass_unreviewed), is told so where
// it was announced, once: no post keeps saying that the plan may run, nor
// that no approval is needed, while run refuses it.
func TestApprovalThatStopsHoldingIsSaid(t *testing.T) {
	w := bridgetest.NewBreakGlass(t, 1)
	now := time.Now().UTC()
	f, rec := followed(t, w, &now)
	ctx := context.Background()

	breakGlass(t, w, w.FP, now.Add(-time.Minute))
	f.Check(ctx)
	got := rec.take()
	if len(got) != 1 || got[0].n.Kind != bridge.EventDecided || !got[0].n.Final || !got[0].n.Approved {
		t.Fatalf("the gate opened: heard %+v, want one final approved notice", got)
	}

	earlier := breakGlass(t, w, "sha256:"+strings.Repeat("ab", 32), now.Add(-30*time.Minute))
	if _, err := w.Store.Consume(earlier, 1, "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if g := runGate(t, w, now); g != "break_glass_unreviewed" {
		t.Fatalf("run's gate says %s", g)
	}
	f.Check(ctx)
	f.Check(ctx)
	got = rec.take()
	if len(got) != 1 {
		t.Fatalf("the gate closed again: heard %d notices, want 1: %+v", len(got), got)
	}
	if n := got[0].n; n.Approved || n.Final || !n.Reopened || !strings.Contains(n.Text, "break_glass_unreviewed") || strings.Contains(n.Text, "may run it") {
		t.Errorf("the gate closed again: notice %+v", n)
	}
	if v := got[0].view; v.Gate != "break_glass_unreviewed" || strings.Contains(strings.Join(bridge.StatusLines(v), "\n"), "may run it") {
		t.Errorf("the post is updated to a view whose gate is %s: %q", v.Gate, bridge.StatusLines(v))
	}

	// alice reviews the earlier run: the gate opens again, and the post
	// says so again, once.
	rv := approval.BreakGlassReview{Record: earlier, Fingerprint: "sha256:" + strings.Repeat("ab", 32), Breaker: bridgetest.Breaker.ID, Reviewer: "alice", Issued: now.Add(-20 * time.Minute)}
	env := bridgetest.Sign(t, "alice", approval.TypeBreakGlassReview, rv)
	id, err := approval.ID(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutBreakGlass(w.Store, bridgetest.Breaker.ID, id, env); err != nil {
		t.Fatal(err)
	}
	f.Check(ctx)
	f.Check(ctx)
	if got = rec.take(); len(got) != 1 || got[0].n.Kind != bridge.EventDecided || !got[0].n.Approved {
		t.Fatalf("the gate opened again: heard %+v, want one approved notice", got)
	}
}

// Which closings of the gate after an announced approval the follow-ups
// tell (docs/adr/0035-an-approval-that-stops-holding.md): every one
// before the plan ran, once, and none after it ran; a withdrawal is told
// by withdraw itself. A closing that leaves the decision open to answers
// reopens it; a veto or an expiry of the record closes it for good.
func TestWhichClosingsAreSaid(t *testing.T) {
	type want struct {
		said             bool
		final, reopened  bool
		code, alsoInText string
		// mention is who is mentioned: the approvers asked, when the
		// decision takes answers again.
		mention string
	}
	// approving opens the gate with alice's approval, counting ttl.
	approving := func(ttl time.Duration) func(t *testing.T, w *bridgetest.World, now time.Time) {
		return func(t *testing.T, w *bridgetest.World, now time.Time) {
			approve(t, w, now.Add(-time.Minute), now.Add(ttl))
		}
	}
	unreadable := func(t *testing.T, w *bridgetest.World) {
		dir := filepath.Join(w.Dir, "state", "store", "evidence", strings.TrimPrefix(w.FP, "sha256:"))
		if err := os.WriteFile(filepath.Join(dir, strings.Repeat("0", 64)+".json"), []byte("not an envelope"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		// open opens the gate at now; close closes it (or not),
		// moving the clock if it likes.
		open  func(t *testing.T, w *bridgetest.World, now time.Time)
		close func(t *testing.T, w *bridgetest.World, now *time.Time)
		want  want
	}{
		{"an approval expires before the run",
			approving(10 * time.Minute),
			func(t *testing.T, w *bridgetest.World, now *time.Time) { *now = now.Add(20 * time.Minute) },
			want{said: true, reopened: true, code: "evidence_expired", alsoInText: "Answers here count again. Missing: 1 of 1 approvals", mention: "alice bob"}},
		{"the record expires before the run",
			approving(50 * time.Minute),
			func(t *testing.T, w *bridgetest.World, now *time.Time) { *now = now.Add(2 * time.Hour) },
			want{said: true, final: true, code: "evidence_expired", alsoInText: "must plan and ask again"}},
		{"a newer record is filed, and the approved one expires",
			approving(50 * time.Minute),
			func(t *testing.T, w *bridgetest.World, now *time.Time) {
				w.FileFor(t, "smith", 3*time.Hour)
				*now = now.Add(2 * time.Hour)
			},
			want{said: true, final: true, code: "evidence_expired", alsoInText: "This certainty record no longer counts"}},
		{"vetoed after the approval",
			approving(time.Hour),
			func(t *testing.T, w *bridgetest.World, now *time.Time) {
				w.Put(t, bridgetest.Sign(t, "bob", approval.TypeTrinity, approval.Answer{Fingerprint: w.FP, Record: w.Record, Answer: approval.Deny,
					Reason: "not during the audit", Approver: "bob", Issued: now.Add(-10 * time.Second), Expires: now.Add(time.Hour)}))
			},
			want{said: true, final: true, code: "vetoed", alsoInText: "Reason: not during the audit"}},
		{"evidence the gate cannot read",
			approving(time.Hour),
			func(t *testing.T, w *bridgetest.World, now *time.Time) { unreadable(t, w) },
			want{said: true, reopened: true, code: "evidence_unreadable", alsoInText: "Nothing may run until the evidence is readable again"}},
		{"the breaker's earlier break-glass run is unreviewed",
			func(t *testing.T, w *bridgetest.World, now time.Time) { breakGlass(t, w, w.FP, now.Add(-time.Minute)) },
			func(t *testing.T, w *bridgetest.World, now *time.Time) {
				earlier := breakGlass(t, w, "sha256:"+strings.Repeat("ab", 32), now.Add(-30*time.Minute))
				if _, err := w.Store.Consume(earlier, 1, "0123456789abcdef"); err != nil {
					t.Fatal(err)
				}
			},
			want{said: true, reopened: true, code: "break_glass_unreviewed", alsoInText: "Missing: a review of break-glass record", mention: "alice bob"}},
		{"withdrawn after the approval (withdraw says so)",
			approving(time.Hour),
			func(t *testing.T, w *bridgetest.World, now *time.Time) { w.Withdraw(t) },
			want{}},
		{"the single-use approval is spent by its run",
			approving(10 * time.Minute),
			func(t *testing.T, w *bridgetest.World, now *time.Time) {
				if _, err := w.Store.Consume(w.Record, 1, "0123456789abcdef"); err != nil {
					t.Fatal(err)
				}
			},
			want{}},
		{"the break-glass record is spent by its run",
			func(t *testing.T, w *bridgetest.World, now time.Time) { breakGlass(t, w, w.FP, now.Add(-time.Minute)) },
			func(t *testing.T, w *bridgetest.World, now *time.Time) {
				if _, err := w.Store.Consume(bgID(t, w), 1, "0123456789abcdef"); err != nil {
					t.Fatal(err)
				}
			},
			want{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := bridgetest.NewBreakGlass(t, 1)
			now := time.Now().UTC()
			f, rec := followed(t, w, &now)
			ctx := context.Background()
			c.open(t, w, now)
			f.Check(ctx)
			if got := rec.take(); len(got) != 1 || !got[0].n.Approved {
				t.Fatalf("the gate opened: heard %+v", got)
			}
			c.close(t, w, &now)
			if g := runGate(t, w, now); g == "open" {
				t.Fatalf("run's gate is still open")
			}
			f.Check(ctx)
			f.Check(ctx)
			got := rec.take()
			if !c.want.said {
				if len(got) != 0 {
					t.Fatalf("heard %+v, want nothing", got)
				}
				// And nothing later either, whatever the clock.
				now = now.Add(3 * time.Hour)
				f.Check(ctx)
				if got := rec.take(); len(got) != 0 {
					t.Fatalf("later: heard %+v, want nothing", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("heard %d notices, want 1: %+v", len(got), got)
			}
			n := got[0].n
			t.Logf("%s", n.Text)
			if n.Kind != bridge.EventUnapproved || n.Approved || n.Final != c.want.final || n.Reopened != c.want.reopened {
				t.Errorf("notice %s final %v reopened %v approved %v, want unapproved final %v reopened %v", n.Kind, n.Final, n.Reopened, n.Approved, c.want.final, c.want.reopened)
			}
			if !strings.HasPrefix(n.Text, "No longer approved: ") || !strings.Contains(n.Text, "("+c.want.code+")") || !strings.Contains(n.Text, c.want.alsoInText) || strings.Contains(n.Text, "may run it") {
				t.Errorf("text %q, want the code %s and %q", n.Text, c.want.code, c.want.alsoInText)
			}
			if strings.Contains(n.Text, w.Dir) {
				t.Errorf("the notice names the bridge host's files: %q", n.Text)
			}
			if names := mentioned(n); names != c.want.mention {
				t.Errorf("mentioned %q", names)
			}
			if v := got[0].view; v.Gate != c.want.code || strings.Contains(strings.Join(bridge.StatusLines(v), "\n"), "may run it") {
				t.Errorf("the post is shown with gate %s: %q", v.Gate, bridge.StatusLines(v))
			}
			if c.want.final {
				// Closed for good: nothing more, even after the record
				// expires.
				now = now.Add(3 * time.Hour)
				f.Check(ctx)
				if got := rec.take(); len(got) != 0 {
					t.Fatalf("after a final notice: heard %+v", got)
				}
			}
		})
	}
}

// bgID is the id of the world's only break-glass record.
func bgID(t *testing.T, w *bridgetest.World) string {
	t.Helper()
	evidence, _, err := w.Store.Evidence(w.FP)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range evidence {
		if env.PayloadType == approval.TypeBreakGlass {
			id, err := approval.ID(env)
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
	}
	t.Fatal("no break-glass record")
	return ""
}

func mentioned(n bridge.Notice) string {
	var ids []string
	for _, p := range n.Mention {
		ids = append(ids, p.ID)
	}
	return strings.Join(ids, " ")
}

// A decision reopened because its approval stopped holding runs its own
// course: it is not reminded again (the notice mentioned the approvers
// asked), and when the gate opens again it is announced again, once; the
// run that then spends it is not a closing.
func TestReopenedDecisionAgain(t *testing.T) {
	w := bridgetest.NewBreakGlass(t, 1)
	now := time.Now().UTC()
	f, rec := followed(t, w, &now)
	f.Settings.RemindAfter, f.Settings.EscalateAfter, f.Settings.EscalateSlack = time.Minute, 2*time.Minute, "#oncall"
	ctx := context.Background()
	approve(t, w, now.Add(-time.Minute), now.Add(10*time.Minute))
	f.Check(ctx)
	if got := rec.take(); len(got) != 1 || !got[0].n.Approved {
		t.Fatalf("the gate opened: heard %+v", got)
	}
	now = now.Add(20 * time.Minute)
	f.Check(ctx)
	if got := rec.take(); len(got) != 1 || !got[0].n.Reopened {
		t.Fatalf("the approval expired: heard %+v", got)
	}
	f.Check(ctx)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("reopened 20m after the post, with remind_after 1m: heard %+v, want nothing", got)
	}
	approve(t, w, now.Add(-time.Minute), now.Add(10*time.Minute))
	f.Check(ctx)
	f.Check(ctx)
	if got := rec.take(); len(got) != 1 || got[0].n.Kind != bridge.EventDecided || !got[0].n.Approved || !got[0].n.Final {
		t.Fatalf("approved again: heard %+v", got)
	}
	if _, err := w.Store.Consume(w.Record, 1, "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	f.Check(ctx)
	now = now.Add(3 * time.Hour)
	f.Check(ctx)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("ran: heard %+v", got)
	}
	var kinds []string
	events, err := f.Events.List(w.FP)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		kinds = append(kinds, fmt.Sprintf("%s/%d", e.Kind, e.Round))
	}
	slices.Sort(kinds)
	if got, want := strings.Join(kinds, " "), "decided/0 decided/1 ran/1 unapproved/0"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}

// While the gate cannot read the plan's evidence, which record is current
// and when the request expires are unknown: an approval announced is said
// to hold no more, and nothing final is said of any post (no "this record
// no longer counts") until the evidence is readable again; then the gate
// is judged again, and announced again if open.
func TestUnreadableEvidenceSaysNothingFinal(t *testing.T) {
	w := bridgetest.NewBreakGlass(t, 1)
	now := time.Now().UTC()
	f, rec := followed(t, w, &now)
	ctx := context.Background()
	bad := filepath.Join(w.Dir, "state", "store", "evidence", strings.TrimPrefix(w.FP, "sha256:"), strings.Repeat("0", 64)+".json")
	if err := os.WriteFile(bad, []byte("not an envelope"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.Check(ctx)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a pending decision, evidence unreadable: heard %+v, want nothing", got)
	}
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	approve(t, w, now.Add(-time.Minute), now.Add(10*time.Minute))
	f.Check(ctx)
	if got := rec.take(); len(got) != 1 || !got[0].n.Approved {
		t.Fatalf("the gate opened: heard %+v", got)
	}
	if err := os.WriteFile(bad, []byte("not an envelope"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.Check(ctx)
	f.Check(ctx)
	if got := rec.take(); len(got) != 1 || !got[0].n.Reopened || got[0].n.Final {
		t.Fatalf("evidence unreadable after the approval: heard %+v, want one notice reopening it", got)
	}
	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	f.Check(ctx)
	if got := rec.take(); len(got) != 1 || !got[0].n.Approved {
		t.Fatalf("readable again: heard %+v, want the approval announced again", got)
	}
}

// A run of the plan before the approval was announced (on an earlier
// record) is not the run that spends it: when the announced approval
// expires, that is said.
func TestEarlierRunIsNotThisRun(t *testing.T) {
	w := bridgetest.NewBreakGlass(t, 1)
	now := time.Now().UTC()
	f, rec := followed(t, w, &now)
	ctx := context.Background()
	approve(t, w, now.Add(-time.Minute), now.Add(10*time.Minute))
	f.Check(ctx)
	if _, err := w.Store.Consume(w.Record, 1, "0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	f.Check(ctx)
	if got := rec.take(); len(got) != 1 || !got[0].n.Approved {
		t.Fatalf("approved, then ran: heard %+v", got)
	}

	second := w.FileFor(t, "smith", 3*time.Hour)
	if err := w.Ledger.Add(bridge.Post{Kind: bridge.KindSlack, Fingerprint: w.FP, Record: second, Posted: now, SlackChannel: "C1", SlackTS: "2.2"}); err != nil {
		t.Fatal(err)
	}
	approveRecord(t, w, second, now.Add(-time.Minute), now.Add(10*time.Minute))
	f.Check(ctx)
	if got := rec.take(); len(got) != 1 || !got[0].n.Approved || got[0].post.Record != second {
		t.Fatalf("the second record approved: heard %+v", got)
	}
	now = now.Add(20 * time.Minute)
	f.Check(ctx)
	if got := rec.take(); len(got) != 1 || got[0].n.Kind != bridge.EventUnapproved || got[0].post.Record != second {
		t.Fatalf("the second approval expired: heard %+v, want it said", got)
	}
}

// A decided event recorded before approvals were watched does not say
// whether it announced an approval: its post is left as it was.
func TestOlderDecidedEventIsLeftAlone(t *testing.T) {
	w := bridgetest.NewBreakGlass(t, 1)
	now := time.Now().UTC()
	f, rec := followed(t, w, &now)
	approve(t, w, now.Add(-time.Minute), now.Add(10*time.Minute))
	p := bridge.Post{Kind: bridge.KindSlack, SlackChannel: "C1", SlackTS: "1.1"}
	if err := f.Events.Add(bridge.Event{Kind: bridge.EventDecided, Fingerprint: w.FP, Record: w.Record, Where: p.Where(), At: now, Detail: "Decided: approved."}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(20 * time.Minute)
	f.Check(context.Background())
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("heard %+v", got)
	}
}

// The notice break-glass posts (in the ledger under the break-glass
// record's id) is no decision: the follow-ups never say there that a
// "certainty record no longer counts", nor close it, nor (on Slack)
// replace the notice with a decision.
func TestBreakGlassNoticeIsNoDecision(t *testing.T) {
	w := bridgetest.NewBreakGlass(t, 1)
	now := time.Now().UTC()
	f, rec := followed(t, w, &now)
	id := breakGlass(t, w, w.FP, now.Add(-time.Minute))
	if err := w.Ledger.Add(bridge.Post{Kind: bridge.KindSlack, Fingerprint: w.FP, Record: id, Posted: now, SlackChannel: "C1", SlackTS: "3.3"}); err != nil {
		t.Fatal(err)
	}
	f.Check(context.Background())
	for _, h := range rec.take() {
		if h.post.Record == id {
			t.Errorf("the break-glass notice heard %s: %q", h.n.Kind, h.n.Text)
		}
	}
}
