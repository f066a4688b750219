package slackbridge_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/bridge/slackbridge"
	"github.com/prod-write/prod-write/pkg/refusal"
)

const (
	signingSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	botToken      = "xoxb-test-bot-token-123456"
	team          = "T0TEAM"
)

// rig is a world, a fake Slack, the decision posted to it, and the
// bridge's interactions endpoint.
type rig struct {
	w        *bridgetest.World
	slack    *bridgetest.FakeSlack
	api      *slack.Client
	post     bridge.Post
	endpoint string
	log      *syncBuilder
	updates  *slackbridge.Updater
	// stop stops the updater and waits for it.
	stop func()
}

// syncBuilder is a log both the endpoint and the updater write.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// outbox is where the world's bridge keeps its pending Slack updates.
func outbox(w *bridgetest.World) string {
	return filepath.Join(w.Dir, "state", "bridge", "slack-outbox")
}

// newUpdater returns an updater on the world's outbox, retrying quickly.
func newUpdater(w *bridgetest.World, api *slack.Client, log io.Writer) *slackbridge.Updater {
	u := slackbridge.NewUpdater(outbox(w), api, w.Source(), slog.New(slog.NewTextHandler(log, nil)), bridgetest.Secret(signingSecret), bridgetest.Secret(botToken))
	u.MinBackoff, u.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	return u
}

// run runs u until the test ends, and returns a function that stops it and
// waits for it.
func run(t *testing.T, u *slackbridge.Updater) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// settle waits until the updater has delivered (or dropped) everything
// queued.
func (r *rig) settle(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, err := r.updates.Pending()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Slack updates still pending", n)
		}
	}
}

// waitCalls waits until the fake Slack has recorded n calls of method.
func waitCalls(t *testing.T, f *bridgetest.FakeSlack, method string, n int, within time.Duration) []bridgetest.Call {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(5 * time.Millisecond) {
		calls := f.Calls(method)
		if len(calls) >= n {
			return calls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s called %d times in %s, want %d", method, len(calls), within, n)
		}
	}
}

func newRig(t *testing.T, approvers int) *rig {
	t.Helper()
	r := &rig{w: bridgetest.New(t, approvers), slack: bridgetest.NewFakeSlack(botToken), log: &syncBuilder{}}
	t.Cleanup(r.slack.Stop)
	api := slack.New(botToken, slack.OptionAPIURL(r.slack.APIURL()))
	r.api = api
	poster := &slackbridge.Poster{API: api, Channel: "#prod-decisions"}
	v, err := bridge.Describe(r.w.Source(), r.w.FP, r.w.Record, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	posts, errs := bridge.Notify(context.Background(), r.w.Ledger, []bridge.Poster{poster}, v)
	if len(errs) > 0 || len(posts) != 1 {
		t.Fatalf("Notify: %v", errs)
	}
	r.post = posts[0]
	r.updates = newUpdater(r.w, api, r.log)
	r.stop = run(t, r.updates)
	h := &slackbridge.Handler{
		SigningSecret: bridgetest.Secret(signingSecret), Updates: r.updates,
		Attestor: r.w.Attestor(t), Log: slog.New(slog.NewTextHandler(r.log, nil)),
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r.endpoint = srv.URL
	return r
}

// click is a click on the posted decision by user, now.
func (r *rig) click(t *testing.T, user, action string) bridgetest.Click {
	t.Helper()
	posted := r.slack.Calls("chat.postMessage")
	if len(posted) != 1 {
		t.Fatalf("%d messages posted, want 1", len(posted))
	}
	block, value, ok := bridgetest.FindButton(posted[0].Blocks(), action)
	if !ok {
		t.Fatalf("the posted message has no %s button", action)
	}
	return bridgetest.Click{User: user, Team: team, Channel: r.post.SlackChannel, Message: r.post.SlackTS,
		BlockID: block, ActionID: action, Value: value, ActionTS: bridgetest.ActionTS(time.Now())}
}

func (r *rig) send(t *testing.T, body string, header http.Header) (int, string) {
	t.Helper()
	code, resp, err := bridgetest.Post(http.DefaultClient, r.endpoint, body, header)
	if err != nil {
		t.Fatal(err)
	}
	return code, resp
}

func (r *rig) sendClick(t *testing.T, c bridgetest.Click) (int, string) {
	t.Helper()
	body, header := bridgetest.SignRequest(signingSecret, time.Now(), c.Payload())
	return r.send(t, body, header)
}

func TestPostedMessageShowsTheDecision(t *testing.T) {
	r := newRig(t, 1)
	posted := r.slack.Calls("chat.postMessage")
	if len(posted) != 1 {
		t.Fatalf("%d messages posted, want 1", len(posted))
	}
	if got := posted[0].Values.Get("channel"); got != "#prod-decisions" {
		t.Errorf("posted to %q", got)
	}
	blocks := posted[0].Values.Get("blocks")
	for _, want := range []string{
		r.w.FP,                  // the full fingerprint
		"touch-flag", "staging", // operation, target
		"/usr/bin/touch",       // argv, resolved
		"touch the ready flag", // the record's fields
		"staging only", "rm the flag", "high",
		"Planned by:  agent", "Filed by:     smith", // who planned, who filed
		"Expires:",
		r.w.Record,
	} {
		if !strings.Contains(blocks, want) {
			t.Errorf("the message does not show %q", want)
		}
	}
	for _, action := range []string{slackbridge.ActionApprove, slackbridge.ActionDeny} {
		v, ok := bridgetest.ButtonValue(posted[0].Blocks(), action)
		if !ok {
			t.Fatalf("no %s button", action)
		}
		fp, rec, err := slackbridge.ParseButtonValue(v)
		if err != nil || fp != r.w.FP || rec != r.w.Record {
			t.Errorf("%s button value %q: %v", action, v, err)
		}
	}
	if strings.Contains(blocks, `"type":"mrkdwn"`) {
		t.Errorf("the message renders agent-supplied text as mrkdwn")
	}
	ledger, err := r.w.Ledger.Posts(r.w.FP)
	if err != nil || len(ledger) != 1 || ledger[0].SlackChannel != bridgetest.ChannelID || ledger[0].SlackTS == "" {
		t.Errorf("ledger: %+v, %v", ledger, err)
	}
}

// A valid click makes exactly one answer, signed by the bridge, naming
// the approver and the Slack evidence; the gate then opens.
func TestValidClickRecordsOneAnswerAndOpensTheGate(t *testing.T) {
	r := newRig(t, 1)
	if err := r.w.Gate(t); !refusal.Is(err, refusal.NoApproval) {
		t.Fatalf("gate before the click: %v", err)
	}
	c := r.click(t, "UALICE", slackbridge.ActionApprove)
	code, body := r.sendClick(t, c)
	if code != http.StatusOK || !strings.HasPrefix(body, "recorded: approve by alice (answer ") {
		t.Fatalf("click: %d %q", code, body)
	}
	answers := r.w.Answers(t)
	if len(answers) != 1 {
		t.Fatalf("%d answers stored, want 1", len(answers))
	}
	a := answers[0]
	if a.Approver != "alice" || a.Answer != "approve" || a.Record != r.w.Record || a.Fingerprint != r.w.FP {
		t.Errorf("answer %+v", a)
	}
	if a.Channel == nil || a.Channel.Kind != "slack" || a.Channel.SlackUser != "UALICE" || a.Channel.SlackTeam != team || a.Channel.SlackActionTS != c.ActionTS {
		t.Errorf("channel evidence %+v", a.Channel)
	}
	// The answer is dated by the click, not by the bridge's clock.
	if bridgetest.ActionTS(a.Issued) != c.ActionTS || a.Expires.Sub(a.Issued) != time.Hour {
		t.Errorf("issued %s (click %s), expires %s", a.Issued, c.ActionTS, a.Expires)
	}
	if err := r.w.Gate(t); err != nil {
		t.Fatalf("gate after one valid click (approvers = 1): %v", err)
	}
	r.settle(t)
	updates := r.slack.Calls("chat.update")
	if len(updates) != 1 || updates[0].Values.Get("ts") != r.post.SlackTS || updates[0].Values.Get("channel") != r.post.SlackChannel {
		t.Fatalf("updates: %+v", updates)
	}
	if b := updates[0].Values.Get("blocks"); !strings.Contains(b, "approve by alice (Slack UALICE)") || !strings.Contains(b, "Gate: open") {
		t.Errorf("the updated message does not show the outcome: %s", b)
	}
	if n := len(r.slack.Calls("chat.postEphemeral")); n != 0 {
		t.Errorf("%d ephemeral replies to a valid click", n)
	}
}

// Requests that must make no answer: the status code and body say why.
func TestClicksThatMakeNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		req       func(r *rig, t *testing.T) (string, http.Header)
		code      int
		body      string
		ephemeral bool
	}{
		{
			name: "bad signature",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				return bridgetest.SignRequest("not-the-signing-secret", time.Now(), r.click(t, "UALICE", "approve").Payload())
			},
			code: 401, body: "invalid request signature",
		},
		{
			name: "body changed after signing",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				body, h := bridgetest.SignRequest(signingSecret, time.Now(), r.click(t, "UBOB", "approve").Payload())
				return strings.Replace(body, "UBOB", "UALICE", -1), h
			},
			code: 401, body: "invalid request signature",
		},
		{
			name: "no signature",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				body, h := bridgetest.SignRequest(signingSecret, time.Now(), r.click(t, "UALICE", "approve").Payload())
				h.Del("X-Slack-Signature")
				return body, h
			},
			code: 401, body: "invalid request signature",
		},
		{
			name: "stale timestamp",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				then := time.Now().Add(-6 * time.Minute)
				c := r.click(t, "UALICE", "approve")
				c.ActionTS = bridgetest.ActionTS(then)
				return bridgetest.SignRequest(signingSecret, then, c.Payload())
			},
			code: 401, body: "stale request",
		},
		{
			name: "action far older than its request",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				c := r.click(t, "UALICE", "approve")
				c.ActionTS = bridgetest.ActionTS(time.Now().Add(-30 * time.Minute))
				return bridgetest.SignRequest(signingSecret, time.Now(), c.Payload())
			},
			code: 400, body: "stale action",
		},
		{
			name: "unknown user",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				return bridgetest.SignRequest(signingSecret, time.Now(), r.click(t, "UNOBODY", "approve").Payload())
			},
			code: 200, body: "refused (principal_unknown): Slack user UNOBODY maps to no principal", ephemeral: true,
		},
		{
			name: "mapped user who is not an approver",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				return bridgetest.SignRequest(signingSecret, time.Now(), r.click(t, "UEVE", "approve").Payload())
			},
			code: 200, body: "refused (role_missing)", ephemeral: true,
		},
		{
			name: "the planner's Slack user",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				return bridgetest.SignRequest(signingSecret, time.Now(), r.click(t, "UAGENT", "approve").Payload())
			},
			code: 200, body: "refused (self_approval): agent planned this", ephemeral: true,
		},
		{
			name: "the filer's Slack user",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				return bridgetest.SignRequest(signingSecret, time.Now(), r.click(t, "USMITH", "approve").Payload())
			},
			code: 200, body: "refused (self_approval): smith filed the certainty record", ephemeral: true,
		},
		{
			name: "button of another block",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				c := r.click(t, "UALICE", "approve")
				c.BlockID = "something-else"
				return bridgetest.SignRequest(signingSecret, time.Now(), c.Payload())
			},
			code: 200, body: "ignored: not a prod-write answer button",
		},
		{
			name: "near-miss fingerprint in the button value",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				c := r.click(t, "UALICE", "approve")
				c.Value = c.Value[:20] + c.Value[21:]
				return bridgetest.SignRequest(signingSecret, time.Now(), c.Payload())
			},
			code: 400, body: "malformed interaction payload",
		},
		{
			name: "another plan's fingerprint",
			req: func(r *rig, t *testing.T) (string, http.Header) {
				c := r.click(t, "UALICE", "approve")
				c.Value = "sha256:" + strings.Repeat("0", 64) + " " + r.w.Record
				return bridgetest.SignRequest(signingSecret, time.Now(), c.Payload())
			},
			code: 200, body: "refused (plan_absent)", ephemeral: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1)
			body, header := tc.req(r, t)
			code, resp := r.send(t, body, header)
			if code != tc.code || !strings.HasPrefix(resp, tc.body) {
				t.Errorf("got %d %q, want %d %q…", code, resp, tc.code, tc.body)
			}
			if n := len(r.w.Answers(t)); n != 0 {
				t.Errorf("%d answers stored, want none", n)
			}
			if err := r.w.Gate(t); err == nil {
				t.Errorf("the gate opened")
			}
			r.settle(t)
			if n := len(r.slack.Calls("chat.update")); n != 0 {
				t.Errorf("the message was updated %d times", n)
			}
			eph := r.slack.Calls("chat.postEphemeral")
			if tc.ephemeral {
				if len(eph) != 1 || eph[0].Values.Get("user") == "" || !strings.Contains(eph[0].Values.Get("text"), "was not recorded") {
					t.Errorf("ephemeral replies: %+v", eph)
				}
			} else if len(eph) != 0 {
				t.Errorf("ephemeral replies: %+v", eph)
			}
			if strings.Contains(r.log.String(), signingSecret) || strings.Contains(r.log.String(), botToken) {
				t.Errorf("a secret reached the log")
			}
		})
	}
}

// A replayed request (the same bytes again, within the five minutes) and a
// retried one (re-signed later, same click) never make a second answer.
func TestReplayedAndRetriedClicksMakeNoSecondAnswer(t *testing.T) {
	r := newRig(t, 2)
	c := r.click(t, "UALICE", slackbridge.ActionApprove)
	body, header := bridgetest.SignRequest(signingSecret, time.Now(), c.Payload())
	code, first := r.send(t, body, header)
	if code != 200 || !strings.HasPrefix(first, "recorded: approve by alice") {
		t.Fatalf("first: %d %q", code, first)
	}
	id := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(first), "recorded: approve by alice (answer "), ")")

	code, again := r.send(t, body, header)
	if code != 200 || strings.TrimSpace(again) != "already recorded: approve by alice (answer "+id+")" {
		t.Fatalf("replay: %d %q", code, again)
	}
	body, header = bridgetest.SignRequest(signingSecret, time.Now().Add(2*time.Second), c.Payload())
	code, retry := r.send(t, body, header)
	if code != 200 || !strings.HasPrefix(retry, "already recorded") {
		t.Fatalf("retry: %d %q", code, retry)
	}
	if n := len(r.w.Answers(t)); n != 1 {
		t.Fatalf("%d answers stored, want 1", n)
	}
	// Two approvers are needed: one click, however often, is not two.
	if err := r.w.Gate(t); !refusal.Is(err, refusal.NoApproval) {
		t.Fatalf("gate: %v", err)
	}
	c2 := r.click(t, "UBOB", slackbridge.ActionApprove)
	if code, resp := r.sendClick(t, c2); code != 200 || !strings.HasPrefix(resp, "recorded: approve by bob") {
		t.Fatalf("bob: %d %q", code, resp)
	}
	if err := r.w.Gate(t); err != nil {
		t.Fatalf("gate after two approvers: %v", err)
	}
}

// Concurrent deliveries of one click, to two bridge processes (two
// attestors, no shared lock), still store one record: the payload is a
// function of the click, so both sign the same record id.
func TestConcurrentDeliveriesSignTheSameRecord(t *testing.T) {
	w := bridgetest.New(t, 1)
	issued := time.Now().Add(-time.Second)
	req := bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve",
		Channel: slackChannel("UALICE", bridgetest.ActionTS(issued)), Issued: issued}
	ids := make(chan string, 8)
	for i := 0; i < 8; i++ {
		a := w.Attestor(t)
		go func() {
			res, err := a.Answer(req)
			if err != nil {
				t.Error(err)
				ids <- ""
				return
			}
			ids <- res.ID
		}()
	}
	first := <-ids
	for i := 1; i < 8; i++ {
		if id := <-ids; id != first {
			t.Errorf("ids differ: %s, %s", first, id)
		}
	}
	if n := len(w.Answers(t)); n != 1 {
		t.Fatalf("%d answers, want 1", n)
	}
}

func slackChannel(user, actionTS string) approval.Channel {
	return approval.Channel{Kind: "slack", SlackUser: user, SlackTeam: team, SlackActionTS: actionTS}
}

func TestDenyVetoesAndRemovesTheButtons(t *testing.T) {
	r := newRig(t, 1)
	if code, resp := r.sendClick(t, r.click(t, "UALICE", slackbridge.ActionApprove)); code != 200 || !strings.HasPrefix(resp, "recorded") {
		t.Fatalf("approve: %d %q", code, resp)
	}
	if code, resp := r.sendClick(t, r.click(t, "UBOB", slackbridge.ActionDeny)); code != 200 || !strings.HasPrefix(resp, "recorded: deny by bob") {
		t.Fatalf("deny: %d %q", code, resp)
	}
	if err := r.w.Gate(t); !refusal.Is(err, refusal.Vetoed) {
		t.Fatalf("gate: %v", err)
	}
	r.settle(t)
	updates := r.slack.Calls("chat.update")
	last := updates[len(updates)-1]
	if _, ok := bridgetest.ButtonValue(last.Blocks(), slackbridge.ActionApprove); ok {
		t.Errorf("a vetoed decision still has buttons")
	}
	if !strings.Contains(last.Values.Get("blocks"), "Vetoed") {
		t.Errorf("the update does not show the veto")
	}
}

func TestWrongWorkspaceIsRefused(t *testing.T) {
	r := newRig(t, 1)
	h := &slackbridge.Handler{SigningSecret: bridgetest.Secret(signingSecret), Updates: r.updates,
		Attestor: r.w.Attestor(t), Team: "T0OTHER", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptest.NewServer(h)
	defer srv.Close()
	body, header := bridgetest.SignRequest(signingSecret, time.Now(), r.click(t, "UALICE", "approve").Payload())
	code, resp, err := bridgetest.Post(http.DefaultClient, srv.URL, body, header)
	if err != nil || code != 200 || !strings.HasPrefix(resp, "refused (principal_unknown): clicks from Slack workspace T0TEAM") {
		t.Fatalf("%d %q %v", code, resp, err)
	}
	if n := len(r.w.Answers(t)); n != 0 {
		t.Fatalf("%d answers", n)
	}
}

// Withdrawing a plan whose decision was posted marks the message withdrawn
// and takes its buttons away; a click after that is refused.
func TestWithdrawUpdatesTheMessage(t *testing.T) {
	r := newRig(t, 1)
	r.w.Withdraw(t)
	poster := &slackbridge.Poster{API: slack.New(botToken, slack.OptionAPIURL(r.slack.APIURL())), Channel: "#prod-decisions"}
	done, errs := bridge.NotifyWithdrawn(context.Background(), r.w.Ledger, []bridge.Poster{poster}, r.w.FP, func(rec string) (*bridge.View, error) {
		return bridge.Describe(r.w.Source(), r.w.FP, rec, time.Now())
	})
	if len(errs) != 0 || len(done) != 1 {
		t.Fatalf("NotifyWithdrawn: %v %v", done, errs)
	}
	updates := r.slack.Calls("chat.update")
	if len(updates) != 1 || updates[0].Values.Get("ts") != r.post.SlackTS {
		t.Fatalf("updates %+v", updates)
	}
	if !strings.Contains(updates[0].Values.Get("blocks"), "Withdrawn by the planner") {
		t.Errorf("the update does not say withdrawn")
	}
	if _, ok := bridgetest.ButtonValue(updates[0].Blocks(), slackbridge.ActionApprove); ok {
		t.Errorf("a withdrawn decision still has buttons")
	}
	code, resp := r.sendClick(t, r.click(t, "UALICE", slackbridge.ActionApprove))
	if code != 200 || !strings.HasPrefix(resp, "refused (withdrawn)") {
		t.Fatalf("click after withdraw: %d %q", code, resp)
	}
	if n := len(r.w.Answers(t)); n != 0 {
		t.Fatalf("%d answers", n)
	}
	// The clicking user is told, and the message shown withdrawn again.
	r.settle(t)
	if eph := r.slack.Calls("chat.postEphemeral"); len(eph) != 1 || eph[0].Values.Get("user") != "UALICE" || !strings.Contains(eph[0].Values.Get("text"), "withdrawn") {
		t.Errorf("ephemeral replies: %+v", eph)
	}
	if updates := r.slack.Calls("chat.update"); len(updates) != 2 || !strings.Contains(updates[1].Values.Get("blocks"), "Withdrawn by the planner") {
		t.Errorf("updates after the click: %+v", updates)
	}
}

func TestMethodAndPayloadErrors(t *testing.T) {
	r := newRig(t, 1)
	resp, err := http.Get(r.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	body, header := bridgetest.SignRequest(signingSecret, time.Now(), []byte(`{"type":`))
	if code, out := r.send(t, body, header); code != 400 || !strings.HasPrefix(out, "malformed interaction payload") {
		t.Errorf("bad JSON: %d %q", code, out)
	}
	body, header = bridgetest.SignRequest(signingSecret, time.Now(), []byte(`{"type":"view_submission"}`))
	if code, out := r.send(t, body, header); code != 200 || !strings.HasPrefix(out, "ignored") {
		t.Errorf("view_submission: %d %q", code, out)
	}
}
