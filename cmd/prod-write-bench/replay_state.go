package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// benchReplayState is issue 32's incremental replay: replay --state of
// *stateNew receipts on top of a journal of *nReceipts, with the runner's
// checkpoint note of the head (the resumed replay then reads the journal
// from the state's offset only), beside the same on top of a tenth of
// the journal: time and memory must not grow with what the state stands
// on. The same resume without the note, which reads and hashes the
// prefix again, is printed for comparison.
func benchReplayState(dir string) result {
	r := result{name: fmt.Sprintf("replay --state of %d new receipts (s)", *stateNew), goal: "< 2 s, memory independent of the journal", met: true}
	stateKey := filepath.Join(dir, "ci.key")
	k, err := keys.Generate()
	if err != nil {
		fail(err)
	}
	if err := k.WriteNew(stateKey); err != nil {
		fail(err)
	}
	var times []time.Duration
	var rsss []int64
	for _, under := range []int{*nReceipts / 10, *nReceipts} {
		sub := filepath.Join(dir, fmt.Sprint(under))
		if err := os.MkdirAll(sub, 0o700); err != nil {
			fail(err)
		}
		whole := filepath.Join(sub, "whole.jsonl")
		trust, _, err := generateJournal(sub, whole, under+*stateNew)
		if err != nil {
			fail(err)
		}
		writeReplayConfig(sub)
		// CI's last replay stood on the first `under` entries.
		live := filepath.Join(sub, "receipts.jsonl")
		cut := copyLines(whole, live, under)
		state := filepath.Join(sub, "state.json")
		if _, _, err := timeReplay(sub, *bin, []string{"replay", live, "--trust", trust, "--state", state, "--state-key", stateKey}); err != nil {
			fail(fmt.Errorf("the first replay --state: %w", err))
		}
		kept, err := os.ReadFile(state)
		if err != nil {
			fail(err)
		}
		// The new entries arrive, and the service signs its head.
		if err := os.Remove(live); err != nil {
			fail(err)
		}
		if err := os.Rename(whole, live); err != nil {
			fail(err)
		}
		note := filepath.Join(sub, "head.note")
		writeHeadNote(live, note)
		for _, withNote := range []bool{true, false} {
			var best time.Duration
			var peak int64
			for i := 0; i < *rounds; i++ {
				if err := os.WriteFile(state, kept, 0o600); err != nil {
					fail(err)
				}
				args := []string{"replay", live, "--trust", trust, "--state", state, "--state-key", stateKey}
				if withNote {
					args = append(args, "--checkpoint", note)
				}
				el, rss, err := timeReplay(sub, *bin, args)
				if err != nil {
					fail(fmt.Errorf("replay --state: %w", err))
				}
				if best == 0 || el < best {
					best = el
				}
				peak = max(peak, rss)
			}
			how := "with the head's note (seek past the state)"
			if !withNote {
				how = "without a note (the prefix read and hashed again)"
			}
			line := fmt.Sprintf("%d new on top of %d (%.0f MB of journal), %s: %v, peak memory %.1f MB", *stateNew, under, float64(cut)/1e6, how, best.Round(time.Millisecond), float64(peak)/1024)
			fmt.Println("replay-state: " + line)
			r.extra = append(r.extra, line)
			if withNote {
				times, rsss = append(times, best), append(rsss, peak)
			}
		}
	}
	r.ratio = times[1].Seconds()
	// Independent of the journal: ten times the prefix costs at most a
	// little more time and memory (the process's own start and noise).
	if times[1] > 2*time.Second || float64(times[1]) > 1.5*float64(times[0]) || float64(rsss[1]) > 1.5*float64(rsss[0]) {
		r.met = false
	}
	return r
}

// copyLines writes the first n lines of src to dst and returns their bytes.
func copyLines(src, dst string, n int) int64 {
	in, err := os.Open(src)
	if err != nil {
		fail(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		fail(err)
	}
	br := bufio.NewReaderSize(in, 1<<20)
	bw := bufio.NewWriterSize(out, 1<<20)
	var total int64
	for i := 0; i < n; i++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			fail(err)
		}
		bw.Write(line)
		total += int64(len(line))
		if err == io.EOF {
			break
		}
	}
	if err := bw.Flush(); err != nil {
		fail(err)
	}
	if err := out.Close(); err != nil {
		fail(err)
	}
	return total
}

// writeHeadNote writes the runner's checkpoint note of journal's whole
// tree to path, as the service signs its head (receipts checkpoint --note).
func writeHeadNote(journal, path string) {
	f, err := os.Open(journal)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	tree, err := receipts.TreeOf(f)
	if err != nil {
		fail(err)
	}
	b, err := receipts.SignNoteCheckpoint(keys.FromSeed(seed(1)), receipts.NoteOrigin(benchHost), tree, tree.Size())
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fail(err)
	}
}
