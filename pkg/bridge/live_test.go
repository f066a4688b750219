package bridge_test

import (
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// TestAttestorJudgesByTheReloadedPolicy: the Slack and GitHub bridges of a
// runner service judge every click by the policy the service loaded last
// (Source.Live): an approver added by a reload is heard at once, one
// removed is refused there (never recorded and shown as an approval the
// gate then refuses), and a reload that takes the bridge's own role away
// stops it attesting. Attacker input: a click from a Slack account, whose
// principal is what the policy in force says.
func TestAttestorJudgesByTheReloadedPolicy(t *testing.T) {
	w := bridgetest.New(t, 1)
	policyOf := func(members []bridgetest.Member) *approval.Policy {
		t.Helper()
		p, err := approval.ParsePolicy("trust.toml", []byte(bridgetest.PolicyTOML(members)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	without := func(drop string, add ...bridgetest.Member) []bridgetest.Member {
		var out []bridgetest.Member
		for _, m := range bridgetest.Cast {
			if m.ID != drop {
				out = append(out, m)
			}
		}
		return append(out, add...)
	}
	carol := bridgetest.Member{ID: "carol", Roles: []string{"approver"}, Slack: "UCAROL"}
	src := w.Source()
	src.Live = bridge.NewLive(w.Policy, w.Registry)
	a, err := bridge.NewAttestor(src, bridgetest.Key("bridge"), w.Now)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(-time.Second)
	click := func(user, ts string) (*bridge.Result, error) {
		return a.Answer(bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Issued: now,
			Channel: approval.Channel{Kind: "slack", SlackUser: user, SlackTeam: "T1", SlackActionTS: ts}})
	}

	if _, err := click("UCAROL", "1.1"); !refusal.Is(err, refusal.PrincipalUnknown) {
		t.Fatalf("carol before the reload: %v, want principal_unknown", err)
	}
	// Reloaded: carol added, alice removed.
	src.Live.Set(policyOf(without("alice", carol)), w.Registry)
	if _, err := click("UALICE", "1.2"); !refusal.Is(err, refusal.PrincipalUnknown) {
		t.Fatalf("alice after her removal: %v, want principal_unknown", err)
	}
	if n := len(w.Answers(t)); n != 0 {
		t.Fatalf("%d answers recorded by refused clicks", n)
	}
	res, err := click("UCAROL", "1.3")
	if err != nil || res.Approver != "carol" {
		t.Fatalf("carol after the reload: %+v %v", res, err)
	}
	// The bridge's own role taken away: what it signs is no answer (the
	// envelope's signer is judged by the reloaded policy too).
	src.Live.Set(policyOf(without("bridge", carol, bridgetest.Member{ID: "bridge", Roles: []string{"approver"}})), w.Registry)
	if _, err := click("UBOB", "1.4"); !refusal.Is(err, refusal.RoleMissing) {
		t.Fatalf("a bridge whose role was removed: %v, want role_missing", err)
	}
}
