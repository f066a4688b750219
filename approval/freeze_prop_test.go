package approval_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// TestFreezeWinsOverGo is the property of freezes
// (docs/adr/0021-freezes.md): whatever freezes the policy declares and
// whatever grants are filed, a plan with a valid Gera go runs exactly when
// no freeze covers it now, or every freeze that does has a valid grant of
// this plan (freeze role, not the planner, bound to this fingerprint and
// freeze, in time). Otherwise the gate refuses it as frozen, naming a
// freeze that has no grant.
func TestFreezeWinsOverGo(t *testing.T) {
	op := mustOp(t, 1, []string{gera, smith}, true)
	names := []string{"a", "b", "c"}
	rapid.Check(t, func(t *rapid.T) {
		type fz struct {
			name       string
			start, end time.Duration // relative to now
			op, target string        // "" all
		}
		var freezes []fz
		var b strings.Builder
		for i := range rapid.IntRange(0, 3).Draw(t, "freezes") {
			l := fmt.Sprintf("f%d", i)
			f := fz{name: rapid.SampledFrom(names).Draw(t, l+".name")}
			f.start = rapid.SampledFrom([]time.Duration{-48 * time.Hour, -time.Hour, -time.Second, 0, time.Second, time.Hour}).Draw(t, l+".start")
			f.end = f.start + rapid.SampledFrom([]time.Duration{time.Second, time.Hour, 72 * time.Hour}).Draw(t, l+".len")
			f.op = rapid.SampledFrom([]string{"", "", "touch", "deploy"}).Draw(t, l+".op")
			f.target = rapid.SampledFrom([]string{"", "", "staging", "production"}).Draw(t, l+".target")
			freezes = append(freezes, f)
			fmt.Fprintf(&b, "\n[[freeze]]\nname = %q\nstart = %q\nend = %q\n", f.name, testNow.Add(f.start).Format(time.RFC3339), testNow.Add(f.end).Format(time.RFC3339))
			if f.op != "" {
				fmt.Fprintf(&b, "operations = [%q]\n", f.op)
			}
			if f.target != "" {
				fmt.Fprintf(&b, "targets = [%q]\n", f.target)
			}
		}
		p := freezePolicy(t, b.String())
		planner := rapid.SampledFrom([]string{"agent", "fred"}).Draw(t, "planner")
		plan, penv := planFor(t, op, planner, "")
		evidence := []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", 1))}
		granted, stranger := map[string]bool{}, false
		for i := range rapid.IntRange(0, 4).Draw(t, "grants") {
			l := fmt.Sprintf("g%d", i)
			by := rapid.SampledFrom([]string{"cab", "cab", "fred", "gera", "mallory"}).Draw(t, l+".by")
			g := grant(plan.Fingerprint, rapid.SampledFrom(append(names, "zzz")).Draw(t, l+".freeze"), by)
			other := rapid.IntRange(0, 5).Draw(t, l+".otherfp") == 0
			if other {
				g.Fingerprint = "sha256:" + strings.Repeat("1", 64)
			}
			g.Expires = testNow.Add(rapid.SampledFrom([]time.Duration{-time.Second, 0, time.Hour}).Draw(t, l+".expires"))
			evidence = append(evidence, mustSign(t, by, approval.TypeFreezeGrant, g))
			// A record no principal signed may be anything: the gate
			// refuses while it is there (ADR 0012).
			stranger = stranger || by == "mallory"
			if (by == "cab" || (by == "fred" && planner != "fred")) && !other && g.Expires.After(testNow) {
				granted[g.Freeze] = true
			}
		}
		held := false
		for _, f := range freezes {
			in := f.start <= 0 && f.end > 0
			covers := (f.op == "" || f.op == "touch") && (f.target == "" || f.target == "staging")
			if in && covers && !granted[f.name] {
				held = true
			}
		}
		d, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: evidence, Policy: p, Op: op, Now: testNow})
		r, _ := refusal.As(err)
		switch {
		case stranger:
			if r == nil || r.Code != refusal.EvidenceUnreadable {
				t.Fatalf("a stranger's record, and the gate said %v", err)
			}
		case held:
			if r == nil || r.Code != refusal.Frozen {
				t.Fatalf("a freeze without a grant holds, and the gate said %v (path %q)", err, d.Path)
			}
		case err != nil:
			t.Fatalf("no freeze holds, and the gate refused: %v", err)
		}
	})
}
