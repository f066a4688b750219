package receipts_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/receipts"
)

// newTwoBreakGlassWorld extends newReviewWorld: after alice's review the
// agent breaks glass again, on a third plan, and runs it. Lines: 1 intent
// (break-glass), 2 outcome, 3 intent (gera), 4 outcome, 5 review of run 1,
// 6 intent (break-glass, carrying alice's review), 7 outcome.
func newTwoBreakGlassWorld(t *testing.T) *world {
	w, _ := newReviewWorld(t)
	key := filepath.Join(w.dir, "keys", "agent.key")
	fp := fpRE.FindString(w.pw("plan", "config-push", "--target", "staging", "--param", "service=db", "--file", "config=app.toml", "--key", key))
	w.pw("break-glass", fp, "--reason", "db down", "--incident", "INC-2", "--key", key)
	w.pw("run", fp)
	data, err := os.ReadFile(filepath.Join(w.dir, "state", "journal", "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	w.journal = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(w.journal) != 7 {
		t.Fatalf("journal has %d lines, want 7", len(w.journal))
	}
	return w
}

// TestAuditBreakGlass: replay --policy asks the gate what replay's own
// judgement asks it, the break-glass history the intent carries included.
// The policy in force, proposed, refuses nothing; one without the
// breaker's role refuses both break-glass runs; one in which the reviewer
// is no approver refuses the second, whose gate relied on that review
// (before the audit was given the history, it refused nothing).
func TestAuditBreakGlass(t *testing.T) {
	w := newTwoBreakGlassWorld(t)
	trust, err := os.ReadFile(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	policy := func(old, new string) *approval.Policy {
		t.Helper()
		if !bytes.Contains(trust, []byte(old)) {
			t.Fatalf("trust.toml has no %q", old)
		}
		p, err := approval.ParsePolicy("proposed.toml", bytes.Replace(trust, []byte(old), []byte(new), 1))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	current := policy("", "")
	for _, tc := range []struct {
		name     string
		proposed *approval.Policy
		refused  map[int]string // line → the refusal code the audit names
	}{
		{"unchanged", current, map[int]string{}},
		{"the breaker may not break glass", policy(`roles = ["agent", "break-glass", "approver"]`, `roles = ["agent", "approver"]`),
			map[int]string{1: "role_missing", 6: "role_missing"}},
		// alice is the first principal with roles ["approver"].
		{"the reviewer is no approver", policy(`roles = ["approver"]`, `roles = ["operator"]`),
			map[int]string{6: "break_glass_unreviewed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res []receipts.Result
			rp := &receipts.Replayer{Policy: current, Audit: &receipts.Audit{Policy: tc.proposed}}
			sum, err := rp.Replay(strings.NewReader(strings.Join(w.journal, "\n")+"\n"), func(r receipts.Result) { res = append(res, r) })
			if err != nil {
				t.Fatal(err)
			}
			if !sum.OK || sum.BreakGlass != 2 || sum.WouldRefuse != len(tc.refused) {
				t.Fatalf("summary %+v: want ok, 2 break-glass runs, %d the proposal would refuse", sum, len(tc.refused))
			}
			for _, r := range res {
				code, want := tc.refused[r.Line]
				switch {
				case r.Kind != receipts.KindIntent || !want:
					if len(r.Audit) != 0 {
						t.Errorf("line %d (%s): audit %v, want none", r.Line, r.Kind, r.Audit)
					}
				case len(r.Audit) != 1 || r.Audit[0].Code != receipts.WouldRefuse || !strings.HasPrefix(r.Audit[0].Detail, code+": "):
					t.Errorf("line %d: audit %v, want would_refuse %s", r.Line, r.Audit, code)
				}
			}
		})
	}
}

// TestBreakGlassReviewSources: a break-glass run is reviewed by a review
// from any of replay's sources, each reaching the run of the record it
// reviews and no other: a review receipt, a review a later break-glass of
// the breaker relied on (here with the review receipt made invalid), and
// one kept in the store (Replayer.BreakGlassReviews).
func TestBreakGlassReviewSources(t *testing.T) {
	w := newTwoBreakGlassWorld(t)
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	_, rc, err := receipts.Decode([]byte(w.journal[4]))
	if err != nil || rc.Kind != receipts.KindReview {
		t.Fatalf("line 5 is not a review receipt: %v", err)
	}
	review := rc.Review.Review
	_, gera, _ := receipts.Decode([]byte(w.journal[2]))
	// The review receipt names another run: it reviews nothing.
	invalid := append([]string(nil), w.journal...)
	bad := *rc
	bad.RunID = gera.RunID
	invalid[4] = w.sign(&bad, w.runner)
	for _, tc := range []struct {
		name     string
		lines    []string
		stored   []*approval.Envelope
		reviewed map[string]bool // incident → reviewed
	}{
		{"review receipt and the later break-glass", w.journal, nil, map[string]bool{"INC-1": true, "INC-2": false}},
		{"the later break-glass alone", invalid, nil, map[string]bool{"INC-1": true, "INC-2": false}},
		{"no review", w.journal[:4], nil, map[string]bool{"INC-1": false}},
		{"the store", w.journal[:4], []*approval.Envelope{review}, map[string]bool{"INC-1": true}},
		{"the store, a review of another run", invalid[5:], []*approval.Envelope{review}, map[string]bool{"INC-2": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := &receipts.Replayer{Policy: policy, BreakGlassReviews: func(string) []*approval.Envelope { return tc.stored }}
			got := map[string]bool{}
			if _, err := rp.Replay(strings.NewReader(strings.Join(tc.lines, "\n")+"\n"), func(r receipts.Result) {
				if r.BreakGlass != nil {
					got[r.BreakGlass.Incident] = r.BreakGlass.Reviewed
				}
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.reviewed) {
				t.Fatalf("break-glass runs %v, want %v", got, tc.reviewed)
			}
			for inc, want := range tc.reviewed {
				if got[inc] != want {
					t.Errorf("%s reviewed %v, want %v", inc, got[inc], want)
				}
			}
		})
	}
}
