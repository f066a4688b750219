package bridge_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// runGate is what run's gate says of the world's plan now: the input built
// as run builds it (the breakers' break-glass history, and what the store
// could not read), the precondition aside. "open", or the refusal's code.
func runGate(t *testing.T, w *bridgetest.World, now time.Time) string {
	t.Helper()
	env, err := w.Store.GetPlan(w.FP)
	if err != nil {
		t.Fatal(err)
	}
	evidence, problems, err := w.Store.Evidence(w.FP)
	if err != nil {
		t.Fatal(err)
	}
	hist, histProblems, err := runner.BreakGlassHistory(w.Store, w.Policy, w.FP, evidence)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range evidence {
		if id, err := approval.ID(e); err == nil {
			ids = append(ids, id)
		}
	}
	used, err := w.Store.Used(ids)
	if err != nil {
		t.Fatal(err)
	}
	op, _ := w.Registry.Get(w.Plan.Operation)
	_, gateErr := approval.Evaluate(approval.Input{Plan: env, Evidence: evidence, Unreadable: append(runner.ProblemStrings(problems), histProblems...),
		Policy: w.Policy, Op: op, Now: now, Used: used, BreakGlass: hist, PreconditionUnchecked: true})
	if gateErr == nil {
		return "open"
	}
	r, ok := refusal.As(gateErr)
	if !ok {
		t.Fatal(gateErr)
	}
	return string(r.Code)
}

// breakGlass stores bea's break-glass record of plan fp (see
// [bridgetest.World.BreakGlass]) and returns its id.
func breakGlass(t *testing.T, w *bridgetest.World, fp string, issued time.Time) string {
	t.Helper()
	return w.BreakGlass(t, fp, issued)
}

// What the bridges show of the gate (a decision's "Gate:" line, whether
// its requester hears it was approved) is what run's gate would say: a
// break-glass record of the plan counts only as the breaker's earlier
// break-glass runs and their reviews let it, and evidence the store cannot
// read closes the gate. A bridge that read neither would show a plan the
// gate refuses as open, and tell its requester (and its approvers, whose
// approval it still needs) that it was approved.
func TestBridgeShowsRunsGate(t *testing.T) {
	w := bridgetest.NewBreakGlass(t, 1)
	now := time.Now().UTC()
	other := "sha256:" + strings.Repeat("ab", 32)
	var earlier string
	for _, step := range []struct {
		name string
		do   func()
		want string
	}{
		{"no approval yet", func() {}, string(refusal.NoApproval)},
		{"bea breaks glass", func() { breakGlass(t, w, w.FP, now.Add(-time.Minute)) }, "open"},
		{"bea's earlier break-glass run is not reviewed", func() {
			earlier = breakGlass(t, w, other, now.Add(-30*time.Minute))
			if _, err := w.Store.Consume(earlier, 1, "0123456789abcdef"); err != nil {
				t.Fatal(err)
			}
		}, string(refusal.BreakGlassUnreviewed)},
		{"alice reviews it", func() {
			rv := approval.BreakGlassReview{Record: earlier, Fingerprint: other, Breaker: bridgetest.Breaker.ID, Reviewer: "alice", Issued: now.Add(-20 * time.Minute)}
			env := bridgetest.Sign(t, "alice", approval.TypeBreakGlassReview, rv)
			id, err := approval.ID(env)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.PutBreakGlass(w.Store, bridgetest.Breaker.ID, id, env); err != nil {
				t.Fatal(err)
			}
		}, "open"},
		{"evidence the store cannot read", func() {
			dir := filepath.Join(w.Dir, "state", "store", "evidence", strings.TrimPrefix(w.FP, "sha256:"))
			if err := os.WriteFile(filepath.Join(dir, strings.Repeat("0", 64)+".json"), []byte("not an envelope"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, string(refusal.EvidenceUnreadable)},
	} {
		step.do()
		if got := runGate(t, w, now); got != step.want {
			t.Fatalf("%s: run's gate says %s, want %s", step.name, got, step.want)
		}
		j, err := bridge.Judge(w.Source(), w.FP, now)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if v := j.View(w.Record); v.Gate != step.want {
			t.Errorf("%s: the bridges show the gate %s, run's says %s (%s)", step.name, v.Gate, step.want, v.GateWhy)
		}
		req := j.Request(w.Policy, nil, nil, bridge.Settings{TTL: time.Hour})
		if approved := req.State == bridge.RequestApproved; approved != (step.want == "open") {
			t.Errorf("%s: the request is %s, while run's gate says %s", step.name, req.State, step.want)
		}
	}
}
