package bridge_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// answer signs signer's answer to the world's record, issued at.
func answer(t testing.TB, w *bridgetest.World, signer, verdict, reason string, at time.Time) *approval.Envelope {
	return bridgetest.Sign(t, signer, approval.TypeTrinity, approval.Answer{Fingerprint: w.FP, Record: w.Record, Answer: verdict,
		Reason: reason, Approver: signer, Issued: at, Expires: at.Add(time.Hour)})
}

// judge builds the request of the world's plan as status would, at now.
func judge(t *testing.T, w *bridgetest.World, posts []bridge.Post, s bridge.Settings, now time.Time) *bridge.DecisionRequest {
	t.Helper()
	j, err := bridge.Judge(w.Source(), w.FP, now)
	if err != nil {
		t.Fatal(err)
	}
	return j.Request(w.Policy, posts, nil, s)
}

// How a request is built from the gate's judgement, case by case.
func TestBuildRequest(t *testing.T) {
	now := time.Now().UTC()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, w *bridgetest.World) (posts []bridge.Post, s bridge.Settings, at time.Time)
		check func(t *testing.T, w *bridgetest.World, r *bridge.DecisionRequest)
	}{
		{name: "pending: the approvers asked, never the planner or the filer",
			setup: func(t *testing.T, w *bridgetest.World) ([]bridge.Post, bridge.Settings, time.Time) {
				return []bridge.Post{
					{Kind: bridge.KindSlack, Fingerprint: w.FP, Record: w.Record, SlackChannel: "C1", SlackTS: "1.2"},
					{Kind: bridge.KindGitHub, Fingerprint: w.FP, Record: strings.Repeat("0", 64), GitHubRepo: "o/r", GitHubIssue: 9}, // another record's
				}, bridge.Settings{}, now
			},
			check: func(t *testing.T, w *bridgetest.World, r *bridge.DecisionRequest) {
				if r.State != bridge.RequestPending || r.Record != w.Record || r.Decision != nil {
					t.Fatalf("%+v", r)
				}
				if r.ID != bridge.RequestID(w.FP, w.Record) {
					t.Errorf("id %s", r.ID)
				}
				if len(r.Asked) != 2 || r.Asked[0].Channel != "cli" || r.Asked[1].Channel != "slack" || r.Asked[1].SlackThread != "1.2" {
					t.Fatalf("asked %+v", r.Asked)
				}
				if !slices.Equal(r.Asked[0].Who, []string{"alice", "bob"}) {
					t.Errorf("asked %v: the planner (agent) and the filer (smith) are never asked to approve", r.Asked[0].Who)
				}
				if !slices.Contains(r.Missing, "1 of 1 approvals") {
					t.Errorf("missing %v", r.Missing)
				}
			}},
		{name: "approved by a valid approval",
			setup: func(t *testing.T, w *bridgetest.World) ([]bridge.Post, bridge.Settings, time.Time) {
				w.Put(t, answer(t, w, "alice", approval.Approve, "", now.Add(-time.Second)))
				return nil, bridge.Settings{}, now
			},
			check: func(t *testing.T, w *bridgetest.World, r *bridge.DecisionRequest) {
				if r.State != bridge.RequestApproved || r.Decision == nil || r.Decision.By != "alice" || r.Decision.Verdict != approval.Approve || len(r.Missing) != 0 {
					t.Fatalf("%+v %+v", r, r.Decision)
				}
			}},
		{name: "denied: the reason verbatim, wins over an approval",
			setup: func(t *testing.T, w *bridgetest.World) ([]bridge.Post, bridge.Settings, time.Time) {
				w.Put(t, answer(t, w, "alice", approval.Approve, "", now.Add(-2*time.Second)))
				w.Put(t, answer(t, w, "bob", approval.Deny, "not on <!here> a Friday\u202e", now.Add(-time.Second)))
				return nil, bridge.Settings{}, now
			},
			check: func(t *testing.T, w *bridgetest.World, r *bridge.DecisionRequest) {
				if r.State != bridge.RequestDenied || r.Decision == nil || r.Decision.By != "bob" || r.Decision.Reason != "not on <!here> a Friday\u202e" {
					t.Fatalf("%+v %+v", r, r.Decision)
				}
				if s := r.Sentence(); !strings.Contains(s, `reason: not on <!here> a Friday\u202e`) {
					t.Errorf("sentence %q does not escape the reason", s)
				}
			}},
		{name: "withdrawn: nothing missing",
			setup: func(t *testing.T, w *bridgetest.World) ([]bridge.Post, bridge.Settings, time.Time) {
				w.Withdraw(t)
				return nil, bridge.Settings{}, now
			},
			check: func(t *testing.T, w *bridgetest.World, r *bridge.DecisionRequest) {
				if r.State != bridge.RequestWithdrawn || len(r.Missing) != 0 {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "expired with the record: fails closed",
			setup: func(t *testing.T, w *bridgetest.World) ([]bridge.Post, bridge.Settings, time.Time) {
				return nil, bridge.Settings{TTL: 1000 * time.Hour}, now.Add(2 * time.Hour) // the record lives 1h
			},
			check: func(t *testing.T, w *bridgetest.World, r *bridge.DecisionRequest) {
				if r.State != bridge.RequestExpired || !r.Expires.Before(now.Add(2*time.Hour)) {
					t.Fatalf("%+v", r)
				}
				if !strings.Contains(r.Sentence(), "nothing may run") {
					t.Errorf("sentence %q", r.Sentence())
				}
			}},
		{name: "an approval after expiry does not approve",
			setup: func(t *testing.T, w *bridgetest.World) ([]bridge.Post, bridge.Settings, time.Time) {
				w.Put(t, answer(t, w, "alice", approval.Approve, "", now.Add(90*time.Minute)))
				return nil, bridge.Settings{}, now.Add(2 * time.Hour)
			},
			check: func(t *testing.T, w *bridgetest.World, r *bridge.DecisionRequest) {
				if r.State != bridge.RequestExpired {
					t.Fatalf("%+v", r)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := bridgetest.New(t, 1)
			posts, s, at := tc.setup(t, w)
			tc.check(t, w, judge(t, w, posts, s, at))
		})
	}
}

// Before a record is filed the request asks the operators and expires
// requests.ttl after the plan, or the operation's own ttl; a plan that
// writes nothing asks nobody.
func TestBuildRequestBeforeARecord(t *testing.T) {
	w := bridgetest.New(t, 1)
	op, _ := w.Registry.Get(w.Plan.Operation)
	in := bridge.RequestInput{Plan: w.Plan, Op: op, Policy: w.Policy, Refusal: refusal.New(refusal.NoApproval, "none"),
		Settings: bridge.Settings{TTL: 3 * time.Hour}, Now: time.Now()}
	r := bridge.BuildRequest(in)
	if r.Record != "" || r.ID != bridge.RequestID(w.FP, "") || !r.Expires.Equal(w.Plan.Created.Add(3*time.Hour)) {
		t.Fatalf("%+v", r)
	}
	if len(r.Asked) != 1 || r.Asked[0].What != "file a certainty record" || !slices.Equal(r.Asked[0].Who, []string{"smith", "eve"}) {
		t.Fatalf("asked %+v", r.Asked)
	}
	withTTL := *op
	withTTL.Requests = &operations.RequestRules{TTL: "20m"}
	in.Op, in.Settings = &withTTL, in.Settings.For(&withTTL)
	if r := bridge.BuildRequest(in); !r.Expires.Equal(w.Plan.Created.Add(20 * time.Minute)) {
		t.Fatalf("the operation's ttl: expires %s", r.Expires)
	}
	ro := *w.Plan
	ro.Mutating = false
	in.Plan = &ro
	if r := bridge.BuildRequest(in); r != nil {
		t.Fatalf("a plan that writes nothing: %+v", r)
	}
}

// The operation's rules win over the deployment's, key by key.
func TestSettingsFor(t *testing.T) {
	base := bridge.Settings{TTL: 24 * time.Hour, RemindAfter: 30 * time.Minute, EscalateSlack: "#oncall"}
	for _, tc := range []struct {
		name  string
		rules *operations.RequestRules
		want  bridge.Settings
	}{
		{"none", nil, base},
		{"remind sooner", &operations.RequestRules{RemindAfter: "5m"},
			bridge.Settings{TTL: 24 * time.Hour, RemindAfter: 5 * time.Minute, EscalateSlack: "#oncall"}},
		{"reminders off", &operations.RequestRules{RemindAfter: "0s"},
			bridge.Settings{TTL: 24 * time.Hour, EscalateSlack: "#oncall"}},
		{"own target escalates by default", &operations.RequestRules{EscalateSlackChannel: "#dba", EscalateGitHub: "@acme/dba"},
			bridge.Settings{TTL: 24 * time.Hour, RemindAfter: 30 * time.Minute, EscalateAfter: bridge.DefaultEscalateAfter, EscalateSlack: "#dba", EscalateGitHub: "@acme/dba"}},
		{"own target and time", &operations.RequestRules{EscalateSlackChannel: "#dba", EscalateAfter: "10m", TTL: "2h"},
			bridge.Settings{TTL: 2 * time.Hour, RemindAfter: 30 * time.Minute, EscalateAfter: 10 * time.Minute, EscalateSlack: "#dba"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := &operations.Operation{Requests: tc.rules}
			if got := base.For(op); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Whatever answers were given, by whom and when, and whatever the clock
// says: a request is approved exactly when the gate would let the plan
// run at that moment, denied only by a valid veto, and expired only once
// its expiry has passed with the gate closed.
func TestRequestStateFollowsTheGate(t *testing.T) {
	w := bridgetest.New(t, 2)
	op, _ := w.Registry.Get(w.Plan.Operation)
	planEnv, err := w.Store.GetPlan(w.FP)
	if err != nil {
		t.Fatal(err)
	}
	base, _, err := w.Store.Evidence(w.FP) // the plan's record
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC()
	rapid.Check(t, func(rt *rapid.T) {
		evidence := slices.Clone(base)
		for i := range rapid.IntRange(0, 5).Draw(rt, "answers") {
			who := rapid.SampledFrom([]string{"agent", "smith", "alice", "bob", "eve"}).Draw(rt, "who")
			verdict := rapid.SampledFrom([]string{approval.Approve, approval.Deny}).Draw(rt, "verdict")
			at := start.Add(time.Duration(rapid.IntRange(-90, 90).Draw(rt, "at")) * time.Minute)
			env, err := approval.Sign(bridgetest.Key(who), approval.TypeTrinity, approval.Answer{Fingerprint: w.FP, Record: w.Record,
				Answer: verdict, Approver: who, Issued: at, Expires: at.Add(time.Hour), Reason: strings.Repeat("r", i)})
			if err != nil {
				rt.Fatal(err)
			}
			evidence = append(evidence, env)
		}
		if rapid.Bool().Draw(rt, "withdrawn") {
			env, err := approval.Sign(bridgetest.Key("agent"), approval.TypeWithdraw, approval.Withdrawal{Fingerprint: w.FP, Planner: "agent", Issued: start})
			if err != nil {
				rt.Fatal(err)
			}
			evidence = append(evidence, env)
		}
		now := start.Add(time.Duration(rapid.IntRange(-30, 150).Draw(rt, "now")) * time.Minute)
		dec, gateErr := approval.Evaluate(approval.Input{Plan: planEnv, Evidence: evidence, Policy: w.Policy, Op: op, Now: now, Used: map[string]int{}})
		in := bridge.RequestInput{Plan: w.Plan, Op: op, Policy: w.Policy, Now: now}
		if r, ok := refusal.As(gateErr); ok {
			in.Refusal = r
		} else if gateErr != nil {
			rt.Fatal(gateErr)
		}
		if dec != nil {
			in.Evidence = dec.Evidence
		}
		req := bridge.BuildRequest(in)
		switch {
		case (req.State == bridge.RequestApproved) != (gateErr == nil):
			rt.Fatalf("state %s while the gate says %v", req.State, gateErr)
		case req.State == bridge.RequestDenied && (in.Refusal.Code != refusal.Vetoed || req.Decision == nil || req.Decision.Verdict != approval.Deny):
			rt.Fatalf("denied without a veto: %v %+v", gateErr, req.Decision)
		case req.State == bridge.RequestExpired && now.Before(req.Expires):
			rt.Fatalf("expired before %s at %s", req.Expires, now)
		case req.State == bridge.RequestPending && !now.Before(req.Expires):
			rt.Fatalf("pending after its expiry %s at %s", req.Expires, now)
		}
	})
}
