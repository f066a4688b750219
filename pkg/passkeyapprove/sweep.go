package passkeyapprove

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// Sweeping (docs/adr/0048-approval-page.md).
const (
	// SweepGrace is how long a statement is kept past its expiry before
	// a sweep removes it: long enough that clocks of two processes
	// sharing the state directory, or a caller that judged a statement
	// and stalled, do not disagree about it, and that an operator can
	// still read the statement of a decision refused yesterday.
	SweepGrace = 24 * time.Hour
	// SweepLimit bounds what one sweep removes: at most this many nonces
	// (a statement and its marker, or an orphaned marker).
	SweepLimit = 32
	// sweepExamine bounds the statements one sweep reads and the
	// markers it looks up.
	sweepExamine = 256
)

// remove removes a file of the nonces directory; tests replace it to
// crash a sweep between two removals.
var remove = os.Remove

// Sweep removes, from the nonces directory, statements that expired
// [SweepGrace] or more before now, each with its marker, and markers whose
// statement is gone: at most [SweepLimit] nonces, after judging at most a
// few hundred entries from a random place in the directory, so that it
// can run on every statement issued. It returns how many nonces it swept.
// A file it did not write or cannot decode is left alone.
//
// A nonce whose statement is gone is refused by Admit (as unknown, or as
// expired when the decision says it has expired), and a statement is never
// written again once removed (its name is the hash of a random nonce,
// created exclusively). So a sweep removes every statement first, syncs
// the directory, and only then removes markers: whichever removal a crash
// interrupts, and whatever the clock says afterwards, no nonce spent can
// be spent again; and Admit, after it creates a marker, checks that the
// statement is still there, so a spend that judged a statement and then
// stalled past a sweep is refused too. It never removes a statement that
// has not expired, nor the marker of a statement that is still there.
func (i *Issuer) Sweep(now time.Time) (int, error) {
	dir := filepath.Join(i.Dir, "nonces")
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sweeping passkey statements: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return 0, fmt.Errorf("sweeping passkey statements: %w", err)
	}
	slices.Sort(names)
	// From a random place, so that a run of statements still standing
	// does not keep a sweep from ever reaching the ones after it.
	start := 0
	if len(names) > 0 {
		start = rand.IntN(len(names))
	}
	var gone, orphans []string // statements to remove; markers whose statement is gone
	examined := 0
	for k := 0; k < len(names) && len(gone)+len(orphans) < SweepLimit && examined < sweepExamine; k++ {
		n := names[(start+k)%len(names)]
		switch {
		case isStatement(n):
			examined++
			if expired, err := sweepable(filepath.Join(dir, n), now); err != nil {
				return 0, err
			} else if expired {
				gone = append(gone, n)
			}
		case isMarker(n):
			// A marker goes only after its statement: one whose
			// statement is gone is an orphan (a sweep crashed between
			// the two, or a spend stalled past a sweep). Gone is for
			// good: a statement is never written again.
			examined++
			st := strings.TrimSuffix(n, ".used")
			if _, err := os.Lstat(filepath.Join(dir, st)); errors.Is(err, os.ErrNotExist) {
				orphans = append(orphans, st)
			} else if err != nil {
				return 0, fmt.Errorf("sweeping passkey statements: %w", err)
			}
		}
	}
	for _, n := range gone {
		if err := remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("sweeping a passkey statement: %w", err)
		}
	}
	if len(gone) > 0 {
		// Every statement's removal is durable before any marker's is.
		if err := durable.SyncDir(dir); err != nil {
			return 0, err
		}
	}
	markers := map[string]bool{}
	for _, n := range append(gone, orphans...) {
		if markers[n] {
			continue
		}
		markers[n] = true
		if err := remove(filepath.Join(dir, n+".used")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return len(gone), fmt.Errorf("sweeping a spent nonce: %w", err)
		}
	}
	if len(markers) > 0 {
		if err := durable.SyncDir(dir); err != nil {
			return len(gone), err
		}
	}
	return len(markers), nil
}

// sweepable reports whether the statement at path expired SweepGrace or
// more before now. One that cannot be read or decoded is kept: a sweep
// removes only what it has judged.
func sweepable(path string, now time.Time) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // another sweep's
	}
	if err != nil {
		return false, fmt.Errorf("sweeping passkey statements: %w", err)
	}
	var rec issued
	if err := strictjson.Unmarshal(b, &rec); err != nil || rec.Expires.IsZero() {
		return false, nil
	}
	return !now.Before(rec.Expires.Add(SweepGrace)), nil
}

// isStatement reports whether n names a statement: 64 lowercase hex
// digits, as nonceFile makes.
func isStatement(n string) bool {
	if len(n) != 64 {
		return false
	}
	_, err := hex.DecodeString(n)
	return err == nil && strings.ToLower(n) == n
}

// isMarker reports whether n names a spent nonce's marker.
func isMarker(n string) bool {
	s, ok := strings.CutSuffix(n, ".used")
	return ok && isStatement(s)
}
