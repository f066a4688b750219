package runtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/receipts"
)

// TestCrashAtFailpoints kills prod-write with SIGKILL at each failpoint of
// run (docs/DESIGN.md §6) and checks what a crash may leave: either nothing ran, or
// it ran with a durable intent receipt; earlier receipts are untouched; the
// spent approval stays spent; and the next run appends to an intact chain.
func TestCrashAtFailpoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		point     string
		intent    bool // an intent receipt must exist
		ran       bool // the program must have run
		mayFinish bool // the program was started and may still be finishing
	}{
		{"after-consume", false, false, false},
		{"after-intent", true, false, false},
		{"after-start", true, true, true},
		{"after-exit", true, true, false},
	} {
		t.Run(tc.point, func(t *testing.T) {
			t.Parallel()
			d := newDeployment(t, "")
			out := d.path("out.txt")

			// An earlier, complete run: its receipts must survive the crash.
			first := d.plan("append-line", "out="+out, "line=first")
			d.approve(first)
			d.mustRun(nil, "run", first)
			before, err := os.ReadFile(d.journalPath())
			if err != nil {
				t.Fatal(err)
			}

			fp := d.plan("append-line", "out="+out, "line=crashed")
			d.approve(fp)
			r := d.run([]string{"PROD_WRITE_FAILPOINT=" + tc.point}, "run", fp)
			if r.signal != "killed" {
				t.Fatalf("want prod-write killed by SIGKILL at %s, got %s", tc.point, r)
			}

			// What ran.
			if tc.mayFinish {
				// The program was started before the kill; it outlives
				// prod-write, so give it time to finish.
				waitFor(5*time.Second, func() bool { return len(readLines(t, out)) == 2 })
			}
			lines := readLines(t, out)
			switch {
			case tc.ran && (len(lines) != 2 || lines[1] != "crashed"):
				t.Errorf("the program should have run: out.txt = %q", lines)
			case !tc.ran && len(lines) != 1:
				t.Errorf("the program ran although prod-write died at %s: out.txt = %q", tc.point, lines)
			}

			// What the journal says.
			after, err := os.ReadFile(d.journalPath())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(after, before) {
				t.Fatalf("the journal's earlier receipts changed:\nbefore %q\nafter  %q", before, after)
			}
			intents := d.intents(fp)
			crashed := map[string]bool{}
			if tc.intent {
				if len(intents) != 1 {
					t.Fatalf("want 1 intent for the crashed run, got %d", len(intents))
				}
				crashed[intents[0].RunID] = true
				if o := d.outcomes()[intents[0].RunID]; o != nil {
					t.Errorf("an outcome for a run killed at %s: %+v", tc.point, o.Outcome)
				}
			} else if len(intents) != 0 {
				t.Fatalf("want no intent for a run killed at %s, got %d", tc.point, len(intents))
			}
			d.checkChain()
			rep := d.replayOnlyIncomplete(crashed)
			if tc.intent && rep.Summary.Incomplete != 1 {
				t.Errorf("replay should report the crashed run as incomplete: %+v", rep.Summary)
			}

			// The crash spent the approval: running again with it is
			// refused and runs nothing.
			r = d.expect(77, nil, "run", fp, "--json")
			if code := r.lastJSON(t)["code"]; code != "evidence_consumed" {
				t.Errorf("re-run after the crash: code %v, want evidence_consumed\n%s", code, r)
			}
			if n := len(readLines(t, out)); n != len(lines) {
				t.Errorf("the refused re-run ran the program (%d lines, had %d)", n, len(lines))
			}
			if n := len(d.intents(fp)); n != len(intents) {
				t.Errorf("the refused re-run left an intent (%d, had %d)", n, len(intents))
			}

			// A fresh approval runs, appending to an intact chain.
			d.approve(fp)
			d.mustRun(nil, "run", fp)
			if got := readLines(t, out); got[len(got)-1] != "crashed" || len(got) != len(lines)+1 {
				t.Errorf("the next run did not run: out.txt = %q", got)
			}
			final, err := os.ReadFile(d.journalPath())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(final, after) {
				t.Error("the next run changed the receipts before it")
			}
			d.checkChain()
			d.replayOnlyIncomplete(crashed)
		})
	}
}

// TestKillAtRandomMoments SIGKILLs prod-write at random moments of runs of
// a program that marks a file as soon as it starts, and checks the
// invariant of docs/DESIGN.md §6 after every kill: whenever the program's mark
// exists, the journal holds an intent receipt for its plan. Whatever the
// kills leave, the next run appends to an intact chain.
func TestKillAtRandomMoments(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, "")
	marks := d.path("marks")
	if err := os.Mkdir(marks, 0o755); err != nil {
		t.Fatal(err)
	}

	// Calibrate: how long from starting prod-write to the program's mark.
	calib := filepath.Join(marks, "calibration")
	fp := d.plan("mark-sleep", "out="+calib, "ms=0")
	d.approve(fp)
	start := time.Now()
	cmd := d.command(nil, "run", fp)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(10*time.Second, func() bool { return exists(calib) })
	toMark := time.Since(start)
	cmd.Wait()
	window := toMark * 3 / 2
	t.Logf("prod-write reaches the program in %v; killing within %v", toMark, window)

	const seeds = 16
	crashed := map[string]bool{}
	var none, intentOnly, ranWithIntent, finished int
	for seed := int64(1); seed <= seeds; seed++ {
		rng := rand.New(rand.NewSource(seed))
		mark := filepath.Join(marks, fmt.Sprint(seed))
		fp := d.plan("mark-sleep", "out="+mark, "ms=100")
		d.approve(fp)
		delay := time.Duration(rng.Int63n(int64(window)))
		cmd := d.command(nil, "run", fp)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		cmd.Process.Kill()
		err := cmd.Wait()
		// A program started before the kill outlives prod-write: let it
		// make its mark before looking.
		time.Sleep(150 * time.Millisecond)

		intents := d.intents(fp)
		switch {
		case exists(mark) && len(intents) == 0:
			t.Errorf("seed %d (kill after %v): the program ran with no intent receipt", seed, delay)
		case len(intents) > 1:
			t.Errorf("seed %d: %d intents for one approval", seed, len(intents))
		case err == nil:
			finished++
		case exists(mark):
			ranWithIntent++
		case len(intents) == 1:
			intentOnly++
		default:
			none++
		}
		for _, in := range intents {
			if d.outcomes()[in.RunID] == nil {
				crashed[in.RunID] = true
			}
		}
	}
	t.Logf("of %d kills: %d before any intent, %d after the intent and before the program, %d while the program ran, %d after prod-write finished",
		seeds, none, intentOnly, ranWithIntent, finished)

	// Whatever the kills left (a torn tail included), the next run appends
	// to an intact, verifiable chain.
	last := filepath.Join(marks, "last")
	fp = d.plan("mark-sleep", "out="+last, "ms=0")
	d.approve(fp)
	d.mustRun(nil, "run", fp)
	if !exists(last) {
		t.Error("the run after the kills did not run")
	}
	d.checkChain()
	d.replayOnlyIncomplete(crashed)
}

// TestTornTailIsRepaired appends half a receipt to the journal, as a crash
// in the middle of a write would leave it, and checks that the next run
// cuts it off, keeps its bytes beside the journal, records a repair entry,
// and leaves the earlier receipts and the chain intact.
func TestTornTailIsRepaired(t *testing.T) {
	t.Parallel()
	d := newDeployment(t, "")
	out := d.path("out.txt")
	fp := d.plan("append-line", "out="+out, "line=one")
	d.approve(fp)
	d.mustRun(nil, "run", fp)
	before, err := os.ReadFile(d.journalPath())
	if err != nil {
		t.Fatal(err)
	}
	torn := []byte(`{"payloadType":"application/vnd.prod-write.receipt+json","payload":"eyJraW5kIjoiaW50ZW50Iiwic2VxIjoz`)
	f, err := os.OpenFile(d.journalPath(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(torn)
	f.Close()

	fp2 := d.plan("append-line", "out="+out, "line=two")
	d.approve(fp2)
	d.mustRun(nil, "run", fp2)
	if got := readLines(t, out); len(got) != 2 || got[1] != "two" {
		t.Errorf("out.txt = %q", got)
	}

	after, err := os.ReadFile(d.journalPath())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(after, before) {
		t.Fatal("the earlier receipts changed")
	}
	if bytes.Contains(after, torn) {
		t.Error("the torn bytes are still in the journal")
	}
	entries := d.checkChain()
	if len(entries) != 5 {
		t.Fatalf("want intent, outcome, repair, intent, outcome; got %d entries", len(entries))
	}
	rep := entries[2].r
	if rep.Kind != receipts.KindRepair || rep.Repair == nil {
		t.Fatalf("entry 3 is %q, want a repair", rep.Kind)
	}
	sum := sha256.Sum256(torn)
	if rep.Repair.Offset != int64(len(before)) || rep.Repair.Dropped != int64(len(torn)) || rep.Repair.SHA256 != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("repair %+v, want offset %d, %d bytes dropped, their sha256", rep.Repair, len(before), len(torn))
	}
	if rep.Repair.SavedAs == "" || strings.ContainsRune(rep.Repair.SavedAs, '/') {
		t.Fatalf("repair saved_as %q", rep.Repair.SavedAs)
	}
	saved, err := os.ReadFile(filepath.Join(filepath.Dir(d.journalPath()), rep.Repair.SavedAs))
	if err != nil {
		t.Fatalf("the torn bytes were not kept: %v", err)
	}
	if !bytes.Equal(saved, torn) {
		t.Errorf("kept %q, want %q", saved, torn)
	}
	if entries[3].r.Kind != receipts.KindIntent || entries[3].r.Intent.Fingerprint != fp2 {
		t.Errorf("entry 4 is not the new run's intent")
	}
	d.replayOK()
}
