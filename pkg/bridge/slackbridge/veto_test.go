package slackbridge_test

import (
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/bridge/slackbridge"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// Anyone holding the approver role may veto, the filer and the planner
// included (docs/DESIGN.md §3): a deny only reduces what may run. Their approvals
// stay refused (TestClicksThatMakeNoAnswer).
func TestFilerAndPlannerMayDeny(t *testing.T) {
	for _, user := range []string{"USMITH", "UAGENT"} {
		t.Run(user, func(t *testing.T) {
			r := newRig(t, 1)
			code, resp := r.sendClick(t, r.click(t, user, slackbridge.ActionDeny))
			if code != 200 || !strings.HasPrefix(resp, "recorded: deny by ") {
				t.Fatalf("%s's deny: %d %q, want it recorded", user, code, resp)
			}
			err := r.w.Gate(t)
			if r, ok := refusal.As(err); !ok || r.Code != refusal.Vetoed {
				t.Fatalf("after %s's deny the gate says %v, want vetoed", user, err)
			}
		})
	}
}
