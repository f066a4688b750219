package githubbridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/bridge/githubbridge"
)

// The decision issue states the veto rule as the gate applies it (docs/DESIGN.md §3,
// ADR 0012), in the words every surface uses.
func TestIssueBodyStatesTheVetoRule(t *testing.T) {
	w := bridgetest.New(t, 1)
	v, err := bridge.Describe(w.Source(), w.FP, w.Record, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body := githubbridge.Body(v)
	if !strings.Contains(body, bridge.VetoRule) {
		t.Fatalf("the issue body does not state the veto rule:\n%s", body)
	}
	if !strings.Contains(body, "may deny, never approve") {
		t.Errorf("the issue body does not say the planner and filer may deny:\n%s", body)
	}
}
