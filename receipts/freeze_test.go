package receipts_test

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// Replay judges each run by the freezes of the policy version it ran under
// (docs/adr/0021-freezes.md), with the gate itself: a freeze declared later
// does not fail earlier runs, a policy that froze them fails every run it
// does not grant, and a grant the intent carries lets its run through.
func TestReplayJudgesFreezes(t *testing.T) {
	w, old := chWorld(t)
	seed := sha256.Sum256([]byte("prod-write freeze replay test: cab"))
	cab := keys.FromSeed(seed[:])
	trust, err := os.ReadFile(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	// Every run of the journal falls in this freeze.
	frozenTOML := string(trust) + "\n[[principal]]\nid = \"cab\"\nroles = [\"freeze\"]\nkey = \"" + cab.Public().String() + "\"\n" +
		"\n[[freeze]]\nname = \"all\"\nstart = \"2000-01-01\"\nend = \"2999-01-01\"\ntime_zone = \"UTC\"\n"
	frozen, err := approval.ParsePolicy(filepath.Join(w.dir, "trust.toml"), []byte(frozenTOML))
	if err != nil {
		t.Fatal(err)
	}

	// Judged by the frozen policy alone (no history): every mutating run
	// fails, with the freeze named.
	res, sum := chReplay(t, frozen, nil, w.journal)
	if sum.OK {
		t.Fatal("runs under a freeze without a grant replay green")
	}
	failed := 0
	for _, r := range res {
		for _, p := range r.Problems {
			if p.Code != receipts.GateNotSatisfied || !strings.Contains(p.Detail, `frozen: freeze "all"`) {
				t.Errorf("line %d: %s %s; want gate_not_satisfied, frozen", r.Line, p.Code, p.Detail)
			}
			failed++
		}
	}
	if failed != 5 {
		t.Errorf("%d runs failed, want the 5 intents", failed)
	}

	// Judged by the history: the runs name the policy they ran under,
	// which had no freeze, so the later freeze does not fail them.
	h := &receipts.History{Policies: map[string]*approval.Policy{frozen.Digest: frozen, old.Digest: old}, Definitions: map[string]bool{}}
	for _, l := range w.journal {
		if _, r, err := receipts.Decode([]byte(l)); err == nil && r.Intent != nil {
			h.Definitions[r.Intent.Operation.Digest] = true
		}
	}
	var out []receipts.Result
	rp := &receipts.Replayer{Policy: frozen, History: h}
	if sum, err := rp.Replay(strings.NewReader(strings.Join(w.journal, "\n")+"\n"), func(r receipts.Result) { out = append(out, r) }); err != nil || !sum.OK {
		t.Fatalf("judged by the policy each run ran under: %+v %v %v", sum, err, chProblems(out))
	}

	// A grant through the freeze, carried by the intent, lets that run
	// through (the runner re-signs the intent with it).
	lines := w.edit(w.journal, 2, w.runner, true, func(r *receipts.Receipt) {
		g := approval.FreezeGrant{Fingerprint: r.Intent.Fingerprint, Freeze: "all", Granter: "cab", Reason: "INC-7",
			Issued: r.Time.Add(-1e9), Expires: r.Time.Add(3600e9)}
		env, err := approval.Sign(cab, approval.TypeFreezeGrant, g)
		if err != nil {
			t.Fatal(err)
		}
		r.Intent.Evidence = append(r.Intent.Evidence, env)
	})
	res, _ = chReplay(t, frozen, nil, lines)
	if !res[2].OK {
		t.Fatalf("the granted run: %v", res[2].Problems)
	}
	if res[0].OK {
		t.Fatal("a run without a grant passes")
	}
}

// replay --policy (docs/adr/0022-policy-dry-run.md): a proposed policy's
// verdicts are reported per run and fail nothing; they are the gate's own
// verdicts.
func TestReplayAuditsAProposedPolicy(t *testing.T) {
	w, old := chWorld(t)
	trust, err := os.ReadFile(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	proposed, err := approval.ParsePolicy("proposed.toml", append(trust, "\n[[freeze]]\nname = \"all\"\nstart = \"2000-01-01T00:00:00Z\"\nend = \"2999-01-01T00:00:00Z\"\n"...))
	if err != nil {
		t.Fatal(err)
	}
	var res []receipts.Result
	rp := &receipts.Replayer{Policy: old, Audit: &receipts.Audit{Policy: proposed}}
	sum, err := rp.Replay(strings.NewReader(strings.Join(w.journal, "\n")+"\n"), func(r receipts.Result) { res = append(res, r) })
	if err != nil {
		t.Fatal(err)
	}
	if !sum.OK || sum.Failed != 0 || sum.WouldRefuse != 5 {
		t.Fatalf("summary %+v: want ok, nothing failed, 5 runs the proposal would refuse", sum)
	}
	for _, r := range res {
		if r.Kind != receipts.KindIntent {
			if len(r.Audit) != 0 {
				t.Errorf("line %d (%s) audited", r.Line, r.Kind)
			}
			continue
		}
		if len(r.Audit) != 1 || r.Audit[0].Code != receipts.WouldRefuse || !strings.HasPrefix(r.Audit[0].Detail, `frozen: freeze "all"`) {
			t.Errorf("line %d: audit %v", r.Line, r.Audit)
		}
	}
	// The same policy as proposal: nothing to report.
	rp = &receipts.Replayer{Policy: old, Audit: &receipts.Audit{Policy: old}}
	if sum, _ := rp.Replay(strings.NewReader(strings.Join(w.journal, "\n")+"\n"), func(receipts.Result) {}); sum.WouldRefuse != 0 {
		t.Fatalf("the current policy as proposal would refuse %d runs", sum.WouldRefuse)
	}
}
