package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// benchReplayState is the replay-state figure (docs/PERFORMANCE.md): replay
// --state of *stateNew receipts on top of a journal of *nReceipts, with the
// runner's checkpoint note of the head (the resumed replay then reads the
// journal from the state's offset only), beside the same on top of a tenth
// of the journal: time and memory must not grow with what the state stands
// on. The same resume without the note, which reads and hashes the prefix
// again, is printed for comparison.
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
	unders := []int{*nReceipts / 10, *nReceipts}
	if *stateUnder != "" {
		unders = nil
		for _, f := range strings.Split(*stateUnder, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				fail(fmt.Errorf("-state-under: %q is not a count of receipts", f))
			}
			unders = append(unders, n)
		}
	}
	for _, under := range unders {
		sub := filepath.Join(dir, fmt.Sprint(under))
		if err := os.MkdirAll(sub, 0o700); err != nil {
			fail(err)
		}
		whole := filepath.Join(sub, "whole.jsonl")
		trust, sigsPerReceipt, err := generateJournal(sub, whole, under+*stateNew)
		if err != nil {
			fail(err)
		}
		writeReplayConfig(sub)
		// CI's last replay stood on the first `under` entries.
		live, tail := filepath.Join(sub, "receipts.jsonl"), filepath.Join(sub, "tail.jsonl")
		cut := splitLines(whole, live, tail, under)
		state := filepath.Join(sub, "state.json")
		rate := verifyRate()
		el, rss, err := timeReplay(sub, *bin, []string{"replay", live, "--trust", trust, "--state", state, "--state-key", stateKey})
		if err != nil {
			fail(fmt.Errorf("the first replay --state: %w", err))
		}
		// The first is a full replay, which writes the state.
		got, limit := float64(under)/el.Seconds(), rate/sigsPerReceipt
		line := fmt.Sprintf("the first replay --state, in full, of %d: %v, peak memory %.1f MB; %.0f/s, ed25519 %.0f verifies/s ÷ %.2f signatures per receipt = %.0f/s: %.2f×", under, el.Round(time.Millisecond), float64(rss)/1024, got, rate, sigsPerReceipt, limit, got/limit)
		fmt.Println("replay-state: " + line)
		r.extra = append(r.extra, line)
		kept, err := os.ReadFile(state)
		if err != nil {
			fail(err)
		}
		// The new entries arrive, and the service signs its head.
		appendFileTo(live, tail)
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
			line := fmt.Sprintf("%d new on top of %d (%.0f MB of journal, a state of %.1f MB), %s: %v, peak memory %.1f MB", *stateNew, under, float64(cut)/1e6, float64(len(kept))/1e6, how, best.Round(time.Millisecond), float64(peak)/1024)
			fmt.Println("replay-state: " + line)
			r.extra = append(r.extra, line)
			if withNote {
				times, rsss = append(times, best), append(rsss, peak)
			}
		}
	}
	if len(times) < 2 {
		r.ratio = times[0].Seconds()
		r.met = times[0] < 2*time.Second
		return r
	}
	r.ratio = times[1].Seconds()
	// Independent of the journal: ten times the prefix costs at most a
	// little more time and memory (the process's own start and noise).
	if times[1] > 2*time.Second || float64(times[1]) > 1.5*float64(times[0]) || float64(rsss[1]) > 1.5*float64(rsss[0]) {
		r.met = false
	}
	return r
}

// splitLines makes src the first n lines of itself, renamed to dst, and
// writes the rest to tail; it returns dst's size. A journal of ten
// million receipts is 22 GB: it is never copied whole.
func splitLines(src, dst, tail string, n int) int64 {
	in, err := os.Open(src)
	if err != nil {
		fail(err)
	}
	defer in.Close()
	br := bufio.NewReaderSize(in, 1<<20)
	var cut int64
	for i := 0; i < n; i++ {
		line, err := br.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) {
			cut += int64(len(line))
			line, err = br.ReadSlice('\n')
		}
		if err != nil {
			fail(fmt.Errorf("%s has fewer than %d lines: %w", src, n, err))
		}
		cut += int64(len(line))
	}
	if _, err := in.Seek(cut, io.SeekStart); err != nil {
		fail(err)
	}
	out, err := os.Create(tail)
	if err != nil {
		fail(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		fail(err)
	}
	if err := out.Close(); err != nil {
		fail(err)
	}
	if err := os.Rename(src, dst); err != nil {
		fail(err)
	}
	if err := os.Truncate(dst, cut); err != nil {
		fail(err)
	}
	return cut
}

// appendFileTo appends src's bytes to dst.
func appendFileTo(dst, src string) {
	in, err := os.Open(src)
	if err != nil {
		fail(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		fail(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		fail(err)
	}
	if err := out.Close(); err != nil {
		fail(err)
	}
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
