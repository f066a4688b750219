package passkeyapprove

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/passkeytest"
	"github.com/prod-write/prod-write/pkg/refusal"
)

const testOrigin = "https://approve.example.test"

// world is bridgetest's plan and certainty record, with a policy that
// has a [passkey] table and an approver, pat, whose passkey is enrolled,
// and the issuer of a service on a clock of the test's.
type world struct {
	*bridgetest.World
	pat *passkeytest.Authenticator
	iss *Issuer
	now time.Time
}

func newWorld(t *testing.T) *world {
	t.Helper()
	bw, pat := bridgetest.NewWithPasskey(t, testOrigin)
	w := &world{World: bw, pat: pat, now: time.Now().UTC()}
	w.iss = &Issuer{Dir: filepath.Join(bw.Dir, "state", "passkey-approve"), Now: func() time.Time { return w.now }}
	return w
}

// issue has the service issue a statement approving the world's plan on
// its record.
func (w *world) issue(t *testing.T) *Statement {
	t.Helper()
	st, err := w.iss.Challenge(w.Source(), w.FP, approval.Approve, w.Record)
	if err != nil {
		t.Fatalf("challenge: %v", err)
	}
	return st
}

// envelope is pat's decision over st, as the page's server signs it.
func (w *world) envelope(t *testing.T, st *Statement) *approval.Envelope {
	t.Helper()
	d := approval.PasskeyDecision{Fingerprint: st.Fingerprint, Record: st.Record, Decision: st.Decision, Approver: "pat",
		Reason: "read it", Nonce: st.Nonce, Issued: st.Issued, Expires: st.Expires}
	var err error
	if d.Assertion, err = w.pat.Assert(st.Challenge[:], testOrigin, strings.TrimPrefix(testOrigin, "https://")); err != nil {
		t.Fatal(err)
	}
	env, err := approval.Sign(bridgetest.Key("bridge"), approval.TypePasskey, d)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// admit hands env to the service at now.
func (w *world) admit(env *approval.Envelope, now time.Time) error {
	_, err := w.iss.Admit(w.Source(), env, now)
	return err
}

// stored counts the plan's evidence.
func (w *world) stored(t *testing.T) int {
	t.Helper()
	ev, _, err := w.Store.Evidence(w.FP)
	if err != nil {
		t.Fatal(err)
	}
	return len(ev)
}

// files is what the nonces directory holds of st: its statement, its
// marker.
func (w *world) files(st *Statement) (statement, marker bool) {
	p := filepath.Join(w.iss.Dir, "nonces", nonceFile(st.Nonce))
	_, err := os.Lstat(p)
	_, errU := os.Lstat(p + ".used")
	return err == nil, errU == nil
}

func (w *world) sweep(t *testing.T, now time.Time) int {
	t.Helper()
	n, err := w.iss.Sweep(now)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	return n
}

// refused is err's refusal, failing the test when err is none.
func refused(t *testing.T, err error, what string) *refusal.Error {
	t.Helper()
	r, ok := refusal.As(err)
	if !ok {
		t.Fatalf("%s: %v; want a refusal", what, err)
	}
	return r
}

// A nonce whose statement expired and was swept is refused after the
// sweep as it was before it: the same code and the same reason, whether
// it was never used or was spent, and nothing is stored; a spent nonce
// replayed with the clock turned back to before its expiry is refused
// too, though no longer as consumed (its marker is gone with its
// statement), and leaves no marker behind.
func TestSweptNonceRefusedAsBefore(t *testing.T) {
	for _, row := range []struct {
		name  string
		spent bool
		// at is when the decision is sent, by the statement's expiry.
		at   func(exp time.Time) time.Time
		same bool
		want refusal.Code
	}{
		{"never used, sent when a sweep may remove it", false, func(exp time.Time) time.Time { return exp.Add(SweepGrace) }, true, refusal.EvidenceExpired},
		{"never used, sent a month later", false, func(exp time.Time) time.Time { return exp.Add(30 * 24 * time.Hour) }, true, refusal.EvidenceExpired},
		{"spent, replayed when a sweep may remove it", true, func(exp time.Time) time.Time { return exp.Add(SweepGrace) }, true, refusal.EvidenceExpired},
		{"spent, replayed a month later", true, func(exp time.Time) time.Time { return exp.Add(30 * 24 * time.Hour) }, true, refusal.EvidenceExpired},
		{"spent, replayed with the clock turned back before its expiry", true, func(exp time.Time) time.Time { return exp.Add(-time.Minute) }, false, refusal.SignatureInvalid},
	} {
		t.Run(row.name, func(t *testing.T) {
			w := newWorld(t)
			st := w.issue(t)
			if row.spent {
				if err := w.admit(w.envelope(t, st), w.now); err != nil {
					t.Fatalf("the first use: %v", err)
				}
			}
			held := w.stored(t)
			// A new assertion over the same statement: as valid as the
			// first, but for the nonce.
			again := w.envelope(t, st)
			at := row.at(st.Expires)
			before := refused(t, w.admit(again, at), "before the sweep")
			if n := w.sweep(t, st.Expires.Add(SweepGrace)); n != 1 {
				t.Fatalf("the sweep swept %d nonces, want 1", n)
			}
			if s, u := w.files(st); s || u {
				t.Fatalf("after the sweep: statement %v, marker %v; want both gone", s, u)
			}
			after := refused(t, w.admit(again, at), "after the sweep")
			if row.same && (after.Code != before.Code || after.Reason != before.Reason) {
				t.Fatalf("after the sweep: %s %q; before it: %s %q", after.Code, after.Reason, before.Code, before.Reason)
			}
			if after.Code != row.want {
				t.Fatalf("after the sweep: %s %q; want %s", after.Code, after.Reason, row.want)
			}
			if s, u := w.files(st); s || u {
				t.Fatalf("a refused decision left statement %v, marker %v", s, u)
			}
			if w.stored(t) != held {
				t.Fatal("a swept nonce's decision was stored")
			}
		})
	}
}

// A sweep removes no statement before it is SweepGrace past its expiry,
// nor the marker of a statement still there: an unused statement swept
// at any earlier time still answers once, and a spent one is still
// refused as consumed.
func TestSweepKeepsWhatHasNotExpired(t *testing.T) {
	for _, row := range []struct {
		name string
		at   func(st *Statement) time.Time
		kept bool
	}{
		{"when issued", func(st *Statement) time.Time { return st.Issued }, true},
		{"a nanosecond before expiry", func(st *Statement) time.Time { return st.Expires.Add(-time.Nanosecond) }, true},
		{"at expiry", func(st *Statement) time.Time { return st.Expires }, true},
		{"within the grace", func(st *Statement) time.Time { return st.Expires.Add(SweepGrace - time.Nanosecond) }, true},
		{"at the grace's end", func(st *Statement) time.Time { return st.Expires.Add(SweepGrace) }, false},
	} {
		for _, spent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/spent=%v", row.name, spent), func(t *testing.T) {
				w := newWorld(t)
				st := w.issue(t)
				if spent {
					if err := w.admit(w.envelope(t, st), w.now); err != nil {
						t.Fatalf("the first use: %v", err)
					}
				}
				w.sweep(t, row.at(st))
				s, u := w.files(st)
				if row.kept != s || (spent && row.kept != u) || (!spent && u) {
					t.Fatalf("after a sweep %s: statement %v, marker %v; want kept %v", row.name, s, u, row.kept)
				}
				if !row.kept {
					return
				}
				err := w.admit(w.envelope(t, st), w.now)
				if !spent && err != nil {
					t.Fatalf("an unused statement kept by the sweep: %v", err)
				}
				if spent && !refusal.Is(err, refusal.EvidenceConsumed) {
					t.Fatalf("a spent statement kept by the sweep: %v; want evidence_consumed", err)
				}
			})
		}
	}
}

var errCrash = errors.New("the sweep crashed")

// A sweep crashed after any number of its removals leaves no spent nonce
// with its statement and without its marker, and every spent nonce is
// refused, even with the clock turned back to before its expiry; the next
// sweep finishes the work.
func TestSweepCrashOrder(t *testing.T) {
	defer func() { remove = os.Remove }()
	for crash := 0; ; crash++ {
		w := newWorld(t)
		var spent []*Statement
		for range 3 {
			st := w.issue(t)
			if err := w.admit(w.envelope(t, st), w.now); err != nil {
				t.Fatalf("a use: %v", err)
			}
			spent = append(spent, st)
		}
		unused := w.issue(t)
		held := w.stored(t)
		var order []string
		remove = func(p string) error {
			if len(order) == crash {
				return errCrash
			}
			order = append(order, filepath.Base(p))
			return os.Remove(p)
		}
		late := unused.Expires.Add(SweepGrace)
		_, err := w.iss.Sweep(late)
		done := err == nil
		if err != nil && !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
		for _, st := range spent {
			name := nonceFile(st.Nonce)
			s, u := w.files(st)
			if s && !u {
				t.Fatalf("crashed after %d removals (%v): a spent nonce's marker is gone and its statement is not", crash, order)
			}
			if i, j := slices.Index(order, name), slices.Index(order, name+".used"); j >= 0 && (i < 0 || i > j) {
				t.Fatalf("a marker was removed before its statement: %v", order)
			}
			for _, at := range []time.Time{w.now, st.Expires, late} {
				if err := w.admit(w.envelope(t, st), at); err == nil {
					t.Fatalf("crashed after %d removals: a spent nonce answered again at %s", crash, at)
				}
			}
		}
		// Errorf, not Fatalf: the next crash points still check the
		// property above.
		remove = os.Remove
		w.sweep(t, late)
		for _, st := range append(spent, unused) {
			if s, u := w.files(st); s || u {
				t.Errorf("the sweep after a crash after %d removals left statement %v, marker %v", crash, s, u)
			}
			if err := w.admit(w.envelope(t, st), w.now); err == nil {
				t.Errorf("crashed after %d removals: a swept nonce answered with the clock turned back", crash)
			}
		}
		if w.stored(t) != held {
			t.Errorf("crashed after %d removals: a replayed decision was stored", crash)
		}
		if done {
			// 4 statements, then 4 markers (the unused one's never made).
			if crash != 8 {
				t.Fatalf("the sweep made %d removals, want 8: %v", crash, order)
			}
			return
		}
	}
}

// A caller that judged a statement and then stalled while a sweep removed
// it and the marker of its first use cannot spend the nonce again: the
// marker it creates is an orphan, and the statement's absence refuses it.
func TestSpendRacingASweep(t *testing.T) {
	w := newWorld(t)
	st := w.issue(t)
	if err := w.admit(w.envelope(t, st), w.now); err != nil {
		t.Fatal(err)
	}
	d := approval.PasskeyDecision{Fingerprint: st.Fingerprint, Record: st.Record, Decision: st.Decision, Approver: "pat", Nonce: st.Nonce, Issued: st.Issued, Expires: st.Expires}
	path := filepath.Join(w.iss.Dir, "nonces", nonceFile(st.Nonce))
	// The stalled caller has judged the statement (spend up to commit)…
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	// …a sweep on another process's clock removes statement and marker…
	w.sweep(t, st.Expires.Add(SweepGrace))
	// …and the caller, its clock before the expiry, commits.
	if err := w.iss.commit(&d, path, w.now); !refusal.Is(err, refusal.SignatureInvalid) {
		t.Fatalf("a stalled spend after a sweep: %v; want refused as a nonce not issued", err)
	}
	if s, u := w.files(st); s || !u {
		t.Fatalf("statement %v, marker %v; want only the stalled spend's marker", s, u)
	}
	if n := w.sweep(t, w.now); n != 1 {
		t.Fatalf("the next sweep swept %d, want the orphaned marker", n)
	}
	if s, u := w.files(st); s || u {
		t.Fatalf("statement %v, marker %v after the orphan's sweep", s, u)
	}
}

// One sweep removes at most SweepLimit nonces; each statement issued
// sweeps, so a backlog drains as statements are issued.
func TestSweepIsBounded(t *testing.T) {
	w := newWorld(t)
	n := 2*SweepLimit + 3
	var first *Statement
	for range n {
		st := w.issue(t)
		if first == nil {
			first = st
		}
	}
	left := func() int {
		t.Helper()
		es, err := os.ReadDir(filepath.Join(w.iss.Dir, "nonces"))
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	late := first.Expires.Add(SweepGrace)
	if got := w.sweep(t, late); got != SweepLimit || left() != n-SweepLimit {
		t.Fatalf("one sweep swept %d, %d left; want %d swept", got, left(), SweepLimit)
	}
	// A statement issued late sweeps as it is issued.
	w.now = late
	w.issue(t)
	if left() != n-2*SweepLimit+1 {
		t.Fatalf("after a statement issued late, %d left; want %d", left(), n-2*SweepLimit+1)
	}
	w.issue(t)
	if left() != 2 {
		t.Fatalf("after two statements issued late, %d left; want theirs only", left())
	}
}

// Sweep ignores what it did not write and what it cannot judge.
func TestSweepLeavesOtherFiles(t *testing.T) {
	w := newWorld(t)
	st := w.issue(t)
	dir := filepath.Join(w.iss.Dir, "nonces")
	others := []string{"README", strings.Repeat("A", 64), "." + nonceFile(st.Nonce) + ".tmp-1", strings.Repeat("0", 64)}
	for i, n := range others {
		data := "x"
		if i == 3 {
			data = "{not json"
		}
		if err := os.WriteFile(filepath.Join(dir, n), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.sweep(t, st.Expires.Add(100*SweepGrace))
	for _, n := range others {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Fatalf("the sweep removed %s", n)
		}
	}
	if s, _ := w.files(st); s {
		t.Fatal("the sweep kept an expired statement")
	}
}
