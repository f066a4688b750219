package runtest

import (
	"bytes"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/prod-write/prod-write/receipts"
)

const parallelRuns = 32

// startAll starts one prod-write per argument list at once (as close to
// together as starting processes allows) and waits for all of them.
func (d *deployment) startAll(argss [][]string) []*result {
	d.t.Helper()
	results := make([]*result, len(argss))
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	for i, args := range argss {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			cmd := d.command(nil, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			ready.Done()
			<-gate
			err := cmd.Run()
			results[i] = finish(cmd, err, args, &stdout, &stderr)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	return results
}

// TestParallelRunsOfOneApproval starts 32 runs of one approval at once: the
// program runs exactly as many times as the approval allows (docs/DESIGN.md §3 rule
// 7), and every other run is refused as evidence_consumed, leaving no
// receipt.
func TestParallelRunsOfOneApproval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		uses    int
		approve func(d *deployment, fp string)
	}{
		{"gera go", 1, func(d *deployment, fp string) { d.approve(fp) }},
		{"gera go with 3 uses", 3, func(d *deployment, fp string) {
			d.mustRun(nil, "gera", "go", fp, "--uses", "3", "--key", "keys/gera.key")
		}},
		{"smith and trinity", 1, func(d *deployment, fp string) {
			d.mustRun(nil, "file", fp, "--key", "keys/smith.key", "--summary", "s", "--effect", "e",
				"--blast-radius", "b", "--rollback", "r", "--certainty", "high")
			d.mustRun(nil, "decide", fp, "approve", "--key", "keys/alice.key")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDeployment(t, "")
			out := d.path("out.txt")
			fp := d.plan("append-line", "out="+out, "line=once")
			tc.approve(d, fp)

			argss := make([][]string, parallelRuns)
			for i := range argss {
				argss[i] = []string{"run", fp, "--json"}
			}
			ran, refused := 0, 0
			for _, r := range d.startAll(argss) {
				switch r.code {
				case 0:
					ran++
				case 77:
					refused++
					if code := r.lastJSON(t)["code"]; code != "evidence_consumed" {
						t.Errorf("refusal code %v, want evidence_consumed\n%s", code, r)
					}
				default:
					t.Errorf("unexpected: %s", r)
				}
			}
			if ran != tc.uses || refused != parallelRuns-tc.uses {
				t.Errorf("%d ran and %d were refused; want %d and %d", ran, refused, tc.uses, parallelRuns-tc.uses)
			}
			if lines := readLines(t, out); len(lines) != tc.uses {
				t.Errorf("the program ran %d times, want %d", len(lines), tc.uses)
			}
			entries := d.checkChain()
			if len(entries) != 2*tc.uses {
				t.Errorf("%d receipts, want %d", len(entries), 2*tc.uses)
			}
			d.replayOK()
		})
	}
}

// TestParallelRunsOfDistinctPlans starts 32 runs of 32 different approved
// plans at once: all run, each leaves a complete receipt pair, and the
// journal's chain survives the concurrent appends.
func TestParallelRunsOfDistinctPlans(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, "")
	out := d.path("out.txt")

	// Plan and approve concurrently too (t.Fatal may not be called from
	// these goroutines, so failures are collected).
	fps := make([]string, parallelRuns)
	failures := make([]*result, parallelRuns)
	var wg sync.WaitGroup
	for i := range fps {
		wg.Go(func() {
			r := d.run(nil, "plan", "append-line", "--target", "staging", "--key", "keys/agent.key",
				"--param", "out="+out, "--param", fmt.Sprintf("line=run %02d", i))
			fps[i] = fpRE.FindString(r.stdout)
			if r.code != 0 || fps[i] == "" {
				failures[i] = r
				return
			}
			if r := d.run(nil, "gera", "go", fps[i], "--key", "keys/gera.key"); r.code != 0 {
				failures[i] = r
			}
		})
	}
	wg.Wait()
	for _, r := range failures {
		if r != nil {
			t.Fatalf("setting up: %s", r)
		}
	}

	argss := make([][]string, parallelRuns)
	for i, fp := range fps {
		argss[i] = []string{"run", fp}
	}
	for _, r := range d.startAll(argss) {
		if r.code != 0 {
			t.Errorf("%s", r)
		}
	}

	lines := readLines(t, out)
	sort.Strings(lines)
	for i := range parallelRuns {
		if i >= len(lines) || lines[i] != fmt.Sprintf("run %02d", i) {
			t.Fatalf("want one line per run, got %q", lines)
		}
	}
	if len(lines) != parallelRuns {
		t.Fatalf("%d lines, want %d", len(lines), parallelRuns)
	}

	entries := d.checkChain()
	if len(entries) != 2*parallelRuns {
		t.Fatalf("%d receipts, want %d", len(entries), 2*parallelRuns)
	}
	byFP := map[string]string{} // fingerprint → run id
	open := map[string]bool{}
	for _, e := range entries {
		switch e.r.Kind {
		case receipts.KindIntent:
			if _, dup := byFP[e.r.Intent.Fingerprint]; dup {
				t.Errorf("two intents for %s", e.r.Intent.Fingerprint)
			}
			byFP[e.r.Intent.Fingerprint] = e.r.RunID
			open[e.r.RunID] = true
		case receipts.KindOutcome:
			if !open[e.r.RunID] {
				t.Errorf("outcome %d for run %s without an intent before it", e.r.Seq, e.r.RunID)
			}
			if e.r.Outcome.ExitCode != 0 {
				t.Errorf("outcome %d: exit %d", e.r.Seq, e.r.Outcome.ExitCode)
			}
			delete(open, e.r.RunID)
		}
	}
	if len(byFP) != parallelRuns || len(open) != 0 {
		t.Errorf("%d runs have intents and %d lack an outcome", len(byFP), len(open))
	}
	rep := d.replayOK()
	if rep.Summary.Runs != parallelRuns || rep.Summary.Entries != 2*parallelRuns {
		t.Errorf("replay summary %+v", rep.Summary)
	}
}
