package receipts_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// The hash chain (docs/DESIGN.md §7) against a holder of the runner key: every entry
// below is signed by a key the policy trusts as the runner and carries the
// right sequence number, so that the link to the line before (Prev) is the
// only thing left to catch the edit. With the Prev comparison
// removed from replay, each of these tests fails.

// chReplay runs the package's Replayer over lines and returns every
// result it emitted and its summary.
func chReplay(t *testing.T, policy *approval.Policy, checkpoint *approval.Envelope, lines []string) ([]receipts.Result, receipts.Summary) {
	t.Helper()
	var res []receipts.Result
	rp := &receipts.Replayer{Policy: policy, Checkpoint: checkpoint}
	sum, err := rp.Replay(strings.NewReader(strings.Join(lines, "\n")+"\n"), func(r receipts.Result) { res = append(res, r) })
	if err != nil {
		t.Fatal(err)
	}
	return res, sum
}

// chProblems is the problem codes of results, by line ("checkpoint" for
// the checkpoint's own verdict).
func chProblems(res []receipts.Result) map[string][]string {
	out := map[string][]string{}
	for _, r := range res {
		at := fmt.Sprint(r.Line)
		if r.Kind == "checkpoint" {
			at = "checkpoint"
		}
		for _, p := range r.Problems {
			out[at] = append(out[at], p.Code)
		}
	}
	return out
}

// chWant fails t unless the replay found exactly want (by line) and
// reported the journal as failed.
func chWant(t *testing.T, res []receipts.Result, sum receipts.Summary, want map[string][]string) {
	t.Helper()
	got := chProblems(res)
	same := len(got) == len(want)
	for at, codes := range want {
		same = same && slices.Equal(got[at], codes)
	}
	if !same || sum.OK || sum.Failed != len(want) {
		t.Fatalf("replay found %v (summary %+v); want exactly %v", got, sum, want)
	}
}

// chWorld is the journal of real runs of newWorld and the policy it was
// made under.
func chWorld(t *testing.T) (*world, *approval.Policy) {
	t.Helper()
	w := newWorld(t)
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if res, sum := chReplay(t, policy, nil, w.journal); !sum.OK || sum.Entries != len(w.journal) {
		t.Fatalf("the untouched journal does not verify: %+v %v", sum, chProblems(res))
	}
	return w, policy
}

// TestChainEditedEntryResigned: an earlier receipt rewritten and signed
// again with the runner key, its seq and Prev left as they were. The
// rewritten entry verifies on its own; the entry after it no longer links
// to it, and that is the only thing wrong.
func TestChainEditedEntryResigned(t *testing.T) {
	w, policy := chWorld(t)
	for _, tc := range []struct {
		name string
		line int // 1-based
		edit func(r *receipts.Receipt)
		also []string // besides chain_broken on the next line
	}{
		{"an outcome's exit status", 2, func(r *receipts.Receipt) { r.Outcome.ExitCode = 1 }, nil},
		{"an outcome's stdout digest", 4, func(r *receipts.Receipt) { r.Outcome.Stdout.SHA256 = "sha256:" + strings.Repeat("0", 64) }, nil},
		// The next line is the run's outcome, which names the intent's
		// old hash.
		{"who invoked a run", 5, func(r *receipts.Receipt) { r.Intent.Invoker.UID, r.Intent.Invoker.Principal = 4242, "someone-else" }, []string{receipts.WrongIntent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := w.edit(w.journal, tc.line-1, w.runner, false, tc.edit)
			if lines[tc.line-1] == w.journal[tc.line-1] {
				t.Fatal("the edit changed nothing")
			}
			res, sum := chReplay(t, policy, nil, lines)
			chWant(t, res, sum, map[string][]string{fmt.Sprint(tc.line + 1): append([]string{receipts.ChainBroken}, tc.also...)})
			if r := res[tc.line-1]; !r.OK || r.Seq != uint64(tc.line) {
				t.Errorf("the rewritten entry itself: %+v; want it to verify (signature and seq are right)", r)
			}
		})
	}

	// The newest entry has no successor to betray it: only a checkpoint
	// taken before the edit does.
	t.Run("the newest entry, against a checkpoint", func(t *testing.T) {
		cpPath := filepath.Join(t.TempDir(), "head.json")
		w.pw("receipts", "checkpoint", "--out", cpPath)
		b, err := os.ReadFile(cpPath)
		if err != nil {
			t.Fatal(err)
		}
		var cp approval.Envelope
		if err := json.Unmarshal(b, &cp); err != nil {
			t.Fatal(err)
		}
		last := len(w.journal) - 1
		lines := w.edit(w.journal, last, w.runner, false, func(r *receipts.Receipt) { r.Outcome.ExitCode = 1 })
		if _, sum := chReplay(t, policy, nil, lines); !sum.OK {
			t.Fatalf("without a checkpoint a rewritten newest entry cannot be told: %+v", sum)
		}
		res, sum := chReplay(t, policy, &cp, lines)
		chWant(t, res, sum, map[string][]string{"checkpoint": {receipts.ChainBroken}})
		if _, sum := chReplay(t, policy, &cp, w.journal); !sum.OK {
			t.Fatalf("the untouched journal against its checkpoint: %+v", sum)
		}
	})
}

// chRunner is a runner key and a policy that trusts it as the runner.
func chRunner(t *testing.T) (*keys.Private, *approval.Policy) {
	t.Helper()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	p, err := approval.ParsePolicy("trust.toml", fmt.Appendf(nil, "[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n", k.Public().String()))
	if err != nil {
		t.Fatal(err)
	}
	return k, p
}

// chJournal appends n entries to a new journal through [receipts.Journal]
// with the runner key k, and returns its lines. Entries of journals with
// different hosts differ.
func chJournal(t *testing.T, k *keys.Private, host string, n int) []string {
	t.Helper()
	j := &receipts.Journal{Path: filepath.Join(t.TempDir(), "receipts.jsonl"), Key: k, Runner: "runner", Host: host}
	for i := range n {
		r := &receipts.Receipt{Kind: receipts.KindRepair, RunID: fmt.Sprintf("%s-%d", host, i), Repair: &receipts.Repair{Dropped: int64(i)}}
		if _, err := j.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(j.Path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestChainSplicedJournals: two journals written with the same runner key
// (two hosts sharing it, or one host's journal and its restored backup),
// cut at the same seq and joined: lines 1..k of A, then k+1.. of B. Every
// signature verifies and the seqs run on; the first line of B does not
// follow the last of A.
func TestChainSplicedJournals(t *testing.T) {
	k, policy := chRunner(t)
	const n = 6
	a, b := chJournal(t, k, "host-a", n), chJournal(t, k, "host-b", n)
	for name, lines := range map[string][]string{"A": a, "B": b} {
		if res, sum := chReplay(t, policy, nil, lines); !sum.OK {
			t.Fatalf("journal %s alone: %+v %v", name, sum, chProblems(res))
		}
	}
	for cut := 1; cut < n; cut++ {
		t.Run(fmt.Sprintf("at seq %d", cut+1), func(t *testing.T) {
			spliced := append(append([]string(nil), a[:cut]...), b[cut:]...)
			res, sum := chReplay(t, policy, nil, spliced)
			// Every entry of B names host-b in host-a's journal.
			want := map[string][]string{fmt.Sprint(cut + 1): {receipts.ChainBroken, receipts.WrongHost}}
			for l := cut + 2; l <= n; l++ {
				want[fmt.Sprint(l)] = []string{receipts.WrongHost}
			}
			chWant(t, res, sum, want)
		})
	}
}

// TestChainSeqOutOfStep: an entry whose Prev links correctly but whose
// seq does not follow (a runner numbering wrongly, or a rewrite that
// renumbers to hide a cut from a checkpoint's count) breaks the chain,
// and only there: the entries after it link to it and follow its seq.
func TestChainSeqOutOfStep(t *testing.T) {
	k, policy := chRunner(t)
	const n = 5
	journal := chJournal(t, k, "host", n)
	for _, tc := range []struct {
		name string
		seq  uint64 // of line 3, which should be 3
	}{
		{"skipped", 5},
		{"repeated", 2},
		{"restarted", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := append([]string(nil), journal...)
			prevSeq := uint64(2)
			for i := 2; i < n; i++ {
				_, r, err := receipts.Decode([]byte(lines[i]))
				if err != nil {
					t.Fatal(err)
				}
				r.Seq, r.Prev = prevSeq+1, receipts.LineHash([]byte(lines[i-1]))
				if i == 2 {
					r.Seq = tc.seq
				}
				prevSeq = r.Seq
				env, err := approval.Sign(k, receipts.PayloadType, r)
				if err != nil {
					t.Fatal(err)
				}
				line, _ := json.Marshal(env)
				lines[i] = string(line)
			}
			res, sum := chReplay(t, policy, nil, lines)
			chWant(t, res, sum, map[string][]string{"3": {receipts.ChainBroken}})
		})
	}
}
