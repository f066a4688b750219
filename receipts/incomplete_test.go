package receipts_test

import (
	"encoding/json"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/receipts"
)

// TestReplayReportsIncompleteRuns: an intent without its outcome (a run
// that crashed, or whose outcome was never written) is reported by the
// package's own Replayer as incomplete, naming the run, its line, seq,
// operation and fingerprint; the journal does not verify, though every
// entry in it does.
func TestReplayReportsIncompleteRuns(t *testing.T) {
	w, policy := chWorld(t)
	for _, tc := range []struct {
		name   string
		drop   int // the 1-based line of the outcome left out
		intent int // the 1-based line of its intent
		op     string
	}{
		// The newest run: the process died after its intent.
		{"the newest run", 10, 9, "config-push"},
		// An older run, and the runner carried on: later entries chain to
		// the intent, as appends after a crash do.
		{"a run in the middle", 4, 3, "noop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := chResign(t, w, w.journal, tc.drop-1)
			_, intent, err := receipts.Decode([]byte(lines[tc.intent-1]))
			if err != nil {
				t.Fatal(err)
			}
			var incomplete []receipts.Result
			res, sum := chReplay(t, policy, nil, lines)
			for i, r := range res {
				switch {
				case i < len(lines) && !r.OK:
					t.Errorf("line %d does not verify: %v", r.Line, r.Problems)
				case i >= len(lines):
					incomplete = append(incomplete, r)
				}
			}
			if sum.OK || sum.Incomplete != 1 || sum.Failed != 0 || sum.Entries != len(lines) || sum.Runs != 5 {
				t.Errorf("summary %+v; want 5 runs, 1 incomplete, none failed, not OK", sum)
			}
			if len(incomplete) != 1 {
				t.Fatalf("%d results after the entries, want the one incomplete run: %+v", len(incomplete), incomplete)
			}
			r := incomplete[0]
			if r.OK || len(r.Problems) != 1 || r.Problems[0].Code != receipts.Incomplete {
				t.Fatalf("incomplete run reported as %+v; want one problem %q", r, receipts.Incomplete)
			}
			if r.Line != tc.intent || r.Seq != uint64(tc.intent) || r.Kind != receipts.KindIntent || r.RunID != intent.RunID || r.RunID == "" ||
				r.Operation != tc.op || r.Fingerprint != intent.Intent.Fingerprint {
				t.Errorf("the report does not name the run: %+v; want line %d, seq %d, run %s, operation %s, fingerprint %s", r, tc.intent, tc.intent, intent.RunID, tc.op, intent.Intent.Fingerprint)
			}
		})
	}

	t.Run("every run complete", func(t *testing.T) {
		res, sum := chReplay(t, policy, nil, w.journal)
		if !sum.OK || sum.Incomplete != 0 || len(res) != len(w.journal) {
			t.Fatalf("summary %+v, %d results; want OK, nothing incomplete", sum, len(res))
		}
	})
}

// chResign returns lines without line drop (0-based), every later line
// renumbered, relinked and signed again with the runner key, as the runner
// would have written them.
func chResign(t *testing.T, w *world, lines []string, drop int) []string {
	t.Helper()
	out := append(append([]string(nil), lines[:drop]...), lines[drop+1:]...)
	for i := drop; i < len(out); i++ {
		_, r, err := receipts.Decode([]byte(out[i]))
		if err != nil {
			t.Fatal(err)
		}
		r.Seq, r.Prev = uint64(i+1), ""
		if i > 0 {
			r.Prev = receipts.LineHash([]byte(out[i-1]))
		}
		if r.Outcome != nil {
			// An outcome names its intent's line; relink it too.
			for j := i - 1; j >= 0; j-- {
				_, in, err := receipts.Decode([]byte(out[j]))
				if err == nil && in.Kind == receipts.KindIntent && in.RunID == r.RunID {
					r.Outcome.Intent = receipts.LineHash([]byte(out[j]))
					break
				}
			}
		}
		env, err := approval.Sign(w.runner, receipts.PayloadType, r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(env)
		out[i] = string(b)
	}
	return out
}
