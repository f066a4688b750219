package approval_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/refusal"
)

func TestExplainSentence(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := &approval.Assessed{ID: strings.Repeat("a", 64), Kind: approval.KindRecord, By: "smith", Verdict: "record", Uses: 1}
	alice := &approval.Assessed{ID: strings.Repeat("b", 64), Kind: approval.KindAnswer, By: "alice", Verdict: approval.Approve, Channel: &approval.Channel{Kind: "slack", SlackUser: "UALICE"}}
	bob := &approval.Assessed{ID: strings.Repeat("c", 64), Kind: approval.KindAnswer, By: "bob", Verdict: approval.Approve, Channel: &approval.Channel{Kind: "github", GitHubLogin: "bob"}}
	carol := &approval.Assessed{ID: strings.Repeat("e", 64), Kind: approval.KindAnswer, By: "carol", Verdict: approval.Approve}
	gera := &approval.Assessed{ID: strings.Repeat("d", 64), Kind: approval.KindGera, By: "gera", Verdict: approval.Go, Uses: 3, Used: 1}
	oldVeto := &approval.Assessed{ID: strings.Repeat("f", 64), Kind: approval.KindAnswer, By: "dave", Verdict: approval.Deny, Expires: at.Add(-time.Hour)}
	base := approval.ExplainInput{Operation: "deploy", OperationDigest: "sha256:op", PolicyDigest: "sha256:pol", At: at}
	tests := []struct {
		name string
		in   func(approval.ExplainInput) approval.ExplainInput
		want []string
	}{
		{"record and approvals through each channel", func(in approval.ExplainInput) approval.ExplainInput {
			in.Path, in.Slot = operations.PathSmithTrinity, 0
			in.Relied = []string{rec.ID, alice.ID, bob.ID, carol.ID}
			in.Evidence = []*approval.Assessed{rec, alice, bob, carol}
			return in
		}, []string{"Allowed by path record+approvals: certainty record aaaaaaaaaaaa by smith + approvals by alice via Slack, bob via GitHub, carol via the CLI; policy sha256:pol, registry sha256:op (operation deploy); veto rules checked: no veto in force (0 seen), no expired veto to lapse, not withdrawn, all evidence readable."}},
		{"gera after a run: the use it spent", func(in approval.ExplainInput) approval.ExplainInput {
			in.Path, in.Slot, in.AnchorUses = operations.PathGera, 1, 3
			in.Relied, in.Evidence = []string{gera.ID}, []*approval.Assessed{gera, oldVeto}
			return in
		}, []string{"Allowed by path gera: Gera go dddddddddddd by gera, use 2 of 3;", "no veto in force (1 seen)", "only decisions issued after dave's deny expired at 2026-01-02T02:04:05Z count"}},
		{"gera before a run: the next use", func(in approval.ExplainInput) approval.ExplainInput {
			in.Path, in.Slot, in.AnchorUses = operations.PathGera, -1, 3
			in.Relied, in.Evidence = []string{gera.ID}, []*approval.Assessed{gera}
			return in
		}, []string{"Gera go dddddddddddd by gera, use 2 of 3;"}},
		{"not mutating", func(in approval.ExplainInput) approval.ExplainInput {
			in.Path = "none"
			return in
		}, []string{"Allowed without approval: operation deploy is not mutating;"}},
		{"refused", func(in approval.ExplainInput) approval.ExplainInput {
			in.Refusal = refusal.New(refusal.NoApproval, "no valid approval").Needs("a gera go")
			in.Unreadable = 1
			return in
		}, []string{"Not allowed (no_approval): no valid approval; missing: a gera go;", "unreadable evidence (it may be a veto)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := approval.Explain(tt.in(base))
			for _, w := range tt.want {
				if !strings.Contains(e.Sentence, w) {
					t.Errorf("sentence\n  %s\nlacks\n  %s", e.Sentence, w)
				}
			}
		})
	}
}

// A receipt's evidence is described as it reads, channel included.
func TestDescribeReadsTheChannel(t *testing.T) {
	k := keyFor("bridge")
	env, err := approval.Sign(k, approval.TypeTrinity, approval.Answer{Fingerprint: "sha256:x", Record: "r", Answer: approval.Approve, Approver: "alice",
		Channel: &approval.Channel{Kind: "github", GitHubLogin: "alice"}})
	if err != nil {
		t.Fatal(err)
	}
	a := approval.Describe(env)
	if a == nil || a.By != "alice" || approval.ChannelName(a.Channel) != "github" || a.Kind != approval.KindAnswer {
		t.Fatalf("Describe = %+v", a)
	}
	env.Payload = "!"
	if approval.Describe(env) != nil {
		t.Error("Describe of a payload that is not base64 should be nil")
	}
}

// Describe reads a record by the gate's strict rules (pkg/strictjson): a
// payload the gate refuses as unreadable is described as nothing (the
// explanation counts it unreadable), never as what encoding/json makes of
// it. Each bad payload names a second actor under a key that differs only
// in case, which encoding/json reads as the same field, last one winning.
func TestDescribeDecodesAsTheGateDoes(t *testing.T) {
	p := mustPolicy(t, demoCast)
	fp := "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		name, signer, payloadType string
		v                         any
		actor                     string // the JSON key of who acts
	}{
		{"gera", "gera", approval.TypeGera, geraGo(fp, "gera", 1), "decider"},
		{"record", "smith", approval.TypeSmith, smithRecord(fp, "smith"), "filer"},
		{"answer", "alice", approval.TypeTrinity, answer(fp, strings.Repeat("b", 64), approval.Deny, "alice"), "approver"},
		{"withdrawal", "agent", approval.TypeWithdraw, approval.Withdrawal{Fingerprint: fp, Planner: "agent", Issued: testNow}, "planner"},
		{"break-glass", "alice", approval.TypeBreakGlass, approval.BreakGlass{Fingerprint: fp, Breaker: "alice", Reason: "r", Incident: "INC-1", Issued: testNow, Expires: testNow.Add(time.Hour)}, "breaker"},
		{"freeze grant", "alice", approval.TypeFreezeGrant, approval.FreezeGrant{Fingerprint: fp, Freeze: "f", Granter: "alice", Reason: "r", Issued: testNow, Expires: testNow.Add(time.Hour)}, "granter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			sign := func(body []byte) *approval.Envelope {
				env, err := dsse.Sign(context.Background(), keyFor(tc.signer), tc.payloadType, body)
				if err != nil {
					t.Fatal(err)
				}
				return env
			}
			if a := approval.Describe(sign(body)); a == nil || a.By != tc.signer {
				t.Fatalf("the well-formed record: %+v", a)
			}
			for _, bad := range []string{
				strings.TrimSuffix(string(body), "}") + `,"` + strings.ToUpper(tc.actor) + `":"mallory"}`,
				strings.TrimSuffix(string(body), "}") + `,"` + tc.actor + `":"mallory"}`,
				strings.TrimSuffix(string(body), "}") + `,"note":"mallory"}`,
				string(body) + ` {}`,
			} {
				env := sign([]byte(bad))
				s, err := p.Open(env)
				if err != nil {
					t.Fatal(err)
				}
				v := reflect.New(reflect.TypeOf(tc.v)).Interface()
				if s.Decode(v) == nil {
					t.Fatalf("the gate reads %s", bad)
				}
				if a := approval.Describe(env); a != nil {
					t.Errorf("Describe reads %s as a %s by %s; the gate refuses it", bad, a.Kind, a.By)
				}
			}
		})
	}
}
