package receipts_test

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// Replay judges the veto rule as the gate does (docs/DESIGN.md §3, ADR 0012): a run
// on a Gera go issued before a deny expired fails, even though the deny had
// expired by the run's time. (Run B of newWorld ran on one Gera go; the
// runner re-signs its intent with a deny it carried.)
func TestReplayJudgesALapsedVeto(t *testing.T) {
	w, policy := chWorld(t)
	bob, err := keys.Load(filepath.Join(w.dir, "keys", "bob.key"))
	if err != nil {
		t.Fatal(err)
	}
	lines := w.edit(w.journal, 2, w.runner, true, func(r *receipts.Receipt) {
		var g approval.GeraDecision
		payload, _ := base64.StdEncoding.DecodeString(r.Intent.Evidence[0].Payload)
		if err := json.Unmarshal(payload, &g); err != nil {
			t.Fatal(err)
		}
		deny := approval.Answer{Fingerprint: g.Fingerprint, Answer: approval.Deny, Approver: "bob",
			Issued: g.Issued.Add(time.Minute), Expires: g.Issued.Add(5 * time.Minute)}
		env, err := approval.Sign(bob, approval.TypeTrinity, deny)
		if err != nil {
			t.Fatal(err)
		}
		r.Intent.Evidence = append(r.Intent.Evidence, env)
		r.Time = g.Issued.Add(10 * time.Minute) // the run, after the deny expired
	})
	res, sum := chReplay(t, policy, nil, lines)
	chWant(t, res, sum, map[string][]string{"3": {receipts.GateNotSatisfied}})
	if d := res[2].Problems[0].Detail; !strings.Contains(d, "vetoed") {
		t.Errorf("problem %q does not say the go was vetoed", d)
	}
}
