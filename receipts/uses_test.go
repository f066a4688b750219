package receipts_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/receipts"
)

// The uses of an approval are counted by one rule within a journal
// (replay's evidence_reused) and across hosts (the fleet's): a record is
// overspent for the one exactly when it is for the other. The world's runs
// (a record with an approval, a single-use go, a two-use go spent twice,
// another single-use go) are each run again 0 to 2 more times, correctly
// chained and signed; the journal is replayed as one host, and the same
// reliances, each run as if on a host of its own, go through a Fleet.
// If either count's rule were changed alone, some draw would tell them
// apart.
func TestUsesRuleIsOneAcrossReplayAndFleet(t *testing.T) {
	w, policy := chWorld(t)
	var intents []*receipts.Receipt
	for _, l := range w.journal {
		_, r, err := receipts.Decode([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind == receipts.KindIntent {
			intents = append(intents, r)
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		lines := slices.Clone(w.journal)
		for i, in := range intents {
			for j := range rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("again%d", i)) {
				r := *in // its run id, seq and prev changed; the rest shared
				r.RunID = fmt.Sprintf("again-%d-%d", i, j)
				r.Seq, r.Prev = uint64(len(lines)+1), receipts.LineHash([]byte(lines[len(lines)-1]))
				lines = append(lines, w.sign(&r, w.runner))
			}
		}

		fleet := &receipts.Fleet{}
		relied := 0
		rp := &receipts.Replayer{Policy: policy, Relied: func(r receipts.Result, ids []string, anchorUses int) {
			relied++
			fleet.Host(r.RunID)(r, ids, anchorUses)
		}}
		inJournal := map[string]bool{}
		_, err := rp.Replay(strings.NewReader(strings.Join(lines, "\n")+"\n"), func(r receipts.Result) {
			for _, p := range r.Problems {
				if p.Code == receipts.EvidenceReused {
					id, _, _ := strings.Cut(strings.TrimPrefix(p.Detail, "record "), "…")
					inJournal[id] = true
				}
			}
		})
		if err != nil {
			rt.Fatal(err)
		}
		if want := len(intents) + len(lines) - len(w.journal); relied != want {
			rt.Fatalf("%d intents relied on records, want %d: the gate did not let the runs again through", relied, want)
		}
		inFleet := map[string]bool{}
		for _, u := range fleet.Reused() {
			inFleet[u.Record[:12]] = true
		}
		if !maps(inJournal, inFleet) {
			rt.Fatalf("overspent within the journal %v, across the fleet %v", inJournal, inFleet)
		}
	})
}

func maps(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
