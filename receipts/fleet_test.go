package receipts_test

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/receipts"
)

// fleetReplay replays each host's lines with its own Replayer, as fleet
// replay does, and returns what the fleet found spent across hosts.
func fleetReplay(t *testing.T, policy *approval.Policy, hosts map[string][]string) []receipts.Reuse {
	t.Helper()
	fleet := &receipts.Fleet{}
	for _, host := range []string{"host-a", "host-b", "host-c"} {
		lines, ok := hosts[host]
		if !ok {
			continue
		}
		rp := &receipts.Replayer{Policy: policy, Relied: fleet.Host(host)}
		sum, err := rp.Replay(strings.NewReader(strings.Join(lines, "\n")+"\n"), func(receipts.Result) {})
		if err != nil || !sum.OK {
			t.Fatalf("%s alone: %+v, %v", host, sum, err)
		}
	}
	return fleet.Reused()
}

// A single-use approval spent on two hosts (each journal verifying on its
// own, as after a point-in-time restore of the store un-spent it) is
// found by the fleet, naming both hosts and receipts; a fleet of one host
// spends nothing twice.
func TestFleetFindsCrossHostDoubleSpend(t *testing.T) {
	w, policy := chWorld(t)
	if got := fleetReplay(t, policy, map[string][]string{"host-a": w.journal}); len(got) != 0 {
		t.Fatalf("one host's journal: %v, want nothing reused", got)
	}

	// The same runs on two hosts: every record the runs relied on is
	// spent beyond what it allows, the two-use go included (4 of 2).
	relied := map[string]bool{}
	rp := &receipts.Replayer{Policy: policy, Relied: func(_ receipts.Result, ids []string, _ int) {
		for _, id := range ids {
			relied[id] = true
		}
	}}
	if _, err := rp.Replay(strings.NewReader(strings.Join(w.journal, "\n")+"\n"), func(receipts.Result) {}); err != nil {
		t.Fatal(err)
	}
	got := fleetReplay(t, policy, map[string][]string{"host-a": w.journal, "host-b": w.journal})
	if len(got) != len(relied) || len(relied) < 5 {
		t.Fatalf("found %d records reused across hosts, want all %d relied on", len(got), len(relied))
	}
	for _, r := range got {
		if !relied[r.Record] || len(r.Spends) != 2*r.Allowed {
			t.Errorf("reuse %+v", r)
		}
		d := r.Detail()
		for _, want := range []string{"host-a seq", "host-b seq", "(run "} {
			if !strings.Contains(d, want) {
				t.Errorf("detail %q does not say %q", d, want)
			}
		}
	}
}

// Property: the fleet reports a record exactly when more runs relied on
// it than it allows and those runs were on more than one host.
func TestFleetCountsAcrossHosts(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		fleet := &receipts.Fleet{}
		spends := map[string]map[string]int{} // record → host → runs
		allowed := map[string]int{}
		uses := map[string]int{"r0": 1, "r1": 1, "r2": 3}
		n := rapid.IntRange(0, 12).Draw(rt, "runs")
		for i := range n {
			host := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "host")
			anchor := rapid.SampledFrom([]string{"r0", "r1", "r2"}).Draw(rt, "anchor")
			ids := []string{anchor}
			if rapid.Bool().Draw(rt, "second") {
				ids = append(ids, "x"+anchor) // a second, single-use record
			}
			fleet.Host(host)(receipts.Result{Seq: uint64(i + 1), RunID: fmt.Sprint(i)}, ids, uses[anchor])
			for j, id := range ids {
				if spends[id] == nil {
					spends[id] = map[string]int{}
				}
				spends[id][host]++
				allowed[id] = 1
				if j == 0 {
					allowed[id] = uses[anchor]
				}
			}
		}
		got := map[string]bool{}
		for _, r := range fleet.Reused() {
			got[r.Record] = true
		}
		for id, byHost := range spends {
			total := 0
			for _, c := range byHost {
				total += c
			}
			want := total > allowed[id] && len(byHost) > 1
			if got[id] != want {
				rt.Fatalf("record %s spent %v (allows %d): reported %v, want %v", id, byHost, allowed[id], got[id], want)
			}
		}
	})
}
