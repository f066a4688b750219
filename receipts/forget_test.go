package receipts_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// synth writes journals of runs on Gera go decisions at chosen times,
// each line chained and signed as the runner signs it: what replay
// forgets (ADR 0053) only shows over days of receipts.
type synth struct {
	runner, agent, gera *keys.Private
	policy              *approval.Policy
	op                  *operations.Operation
	lines               []string
	prev                string
	seq                 uint64
	runs                []synthRun
}

// synthRun is one run synth wrote: its intent, and whether an outcome
// followed it.
type synthRun struct {
	intent *receipts.Receipt
	closed bool
}

func newSynth(t tb) *synth {
	t.Helper()
	s := &synth{runner: keys.FromSeed(bytes.Repeat([]byte{1}, 32)), agent: keys.FromSeed(bytes.Repeat([]byte{2}, 32)), gera: keys.FromSeed(bytes.Repeat([]byte{3}, 32))}
	trust := fmt.Sprintf("[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n\n[[principal]]\nid = \"agent\"\nroles = [\"agent\"]\nkey = %q\n\n[[principal]]\nid = \"gera\"\nroles = [\"gera\"]\nkey = %q\n", s.runner.Public(), s.agent.Public(), s.gera.Public())
	var err error
	if s.policy, err = approval.ParsePolicy("trust.toml", []byte(trust)); err != nil {
		t.Fatal(err)
	}
	ops, err := operations.Parse("noop.toml", []byte("[[operation]]\nname = \"noop\"\nprogram = \"/bin/true\"\nargs = [\"{param.n}\"]\ntargets = [\"staging\"]\n[operation.params.n]\npattern = \"[0-9]+\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	s.op = ops[0]
	s.op.ProgramPath = "/bin/true"
	return s
}

// emit appends r as the runner's next line.
func (s *synth) emit(t tb, r *receipts.Receipt) {
	t.Helper()
	s.seq++
	r.Seq, r.Prev, r.Runner, r.Host = s.seq, s.prev, "runner", "synth"
	env, err := approval.Sign(s.runner, receipts.PayloadType, r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	s.prev = receipts.LineHash(b)
	s.lines = append(s.lines, string(b))
}

// run writes the intent of a new plan, approved by a go of uses that
// expires ttl after at, and its outcome unless open.
func (s *synth) run(t tb, at time.Time, ttl time.Duration, uses int, runID string, open bool) {
	t.Helper()
	i := len(s.runs)
	params := map[string]string{"n": fmt.Sprint(i)}
	b := operations.Bound{
		Operation: s.op.Name, OperationDigest: s.op.Digest, Target: "staging",
		Params: params, Argv: s.op.Argv("staging", params, operations.FilePlaceholder),
		ProgramSHA256: "sha256:" + fmt.Sprintf("%064x", 1), Cwd: "/", Env: []operations.EnvVar{}, Files: []operations.File{},
	}
	plan := &operations.Plan{Version: operations.PlanVersion, Fingerprint: operations.Fingerprint(&b), Bound: b, Mutating: true, Planner: "agent", Created: at}
	planEnv, err := approval.Sign(s.agent, approval.TypePlan, plan)
	if err != nil {
		t.Fatal(err)
	}
	goEnv, err := approval.Sign(s.gera, approval.TypeGera, approval.GeraDecision{Fingerprint: plan.Fingerprint, Decision: approval.Go, Uses: uses, Decider: "gera", Issued: at, Expires: at.Add(ttl)})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := approval.Evaluate(approval.Input{Plan: planEnv, Evidence: []*approval.Envelope{goEnv}, Policy: s.policy, Op: s.op, Now: at})
	if err != nil {
		t.Fatal(err)
	}
	in := &receipts.Receipt{Kind: receipts.KindIntent, Time: at, RunID: runID, Intent: &receipts.Intent{
		Fingerprint: plan.Fingerprint, Operation: s.op, Plan: planEnv, Evidence: []*approval.Envelope{goEnv},
		Path: dec.Path, Anchor: dec.Anchor, Relied: []string{dec.Anchor}, PolicyDigest: s.policy.Digest,
		Signers: map[string]string{"agent": s.agent.Public().String(), "gera": s.gera.Public().String()},
	}}
	s.intent(t, in, open)
	s.runs = append(s.runs, synthRun{intent: in, closed: !open})
}

// intent writes in at its time, and its outcome unless open.
func (s *synth) intent(t tb, in *receipts.Receipt, open bool) {
	t.Helper()
	s.emit(t, in)
	if !open {
		s.emit(t, &receipts.Receipt{Kind: receipts.KindOutcome, Time: in.Time, RunID: in.RunID, Outcome: &receipts.Outcome{Intent: s.prev}})
	}
}

// again writes run j's intent again at at, with run id runID: its
// approval spent once more.
func (s *synth) again(t tb, j int, at time.Time, runID string) {
	t.Helper()
	in := *s.runs[j].intent
	in.Time, in.RunID = at, runID
	s.intent(t, &in, false)
}

func (s *synth) journal() []byte { return []byte(strings.Join(s.lines, "\n") + "\n") }

// verdicts is which lines replay emitted, and whether each passed.
func verdicts(t tb, rp *receipts.Replayer, journal []byte) (out []string, failed int) {
	t.Helper()
	sum, err := rp.Replay(bytes.NewReader(journal), func(r receipts.Result) {
		out = append(out, fmt.Sprintf("line %d %s ok=%v", r.Line, r.Kind, r.OK))
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, sum.Failed
}

// problemCodes replays journal and returns the codes of the problems it
// found, by line.
func problemCodes(t tb, rp *receipts.Replayer, journal []byte) map[int][]string {
	t.Helper()
	codes := map[int][]string{}
	if _, err := rp.Replay(bytes.NewReader(journal), func(r receipts.Result) {
		for _, p := range r.Problems {
			codes[r.Line] = append(codes[r.Line], p.Code)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return codes
}

// Forgetting changes no verdict: over random journals of runs spread
// over days (records expiring in minutes or days, run ids dated or not,
// dated before or after their intents, clocks stepped back), with
// approvals spent again and run ids used again at random later times, a
// replay that forgets passes and fails exactly the lines one that
// remembers everything does. And a replay resumed from a state cut
// anywhere emits exactly the full replay's verdicts: what was forgotten
// before the cut is forgotten after it alike.
func TestForgettingChangesNoVerdict(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []time.Duration{0, time.Millisecond, 2 * time.Minute, -4 * time.Minute, 6 * time.Minute, 55 * time.Minute, 2 * time.Hour, 23*time.Hour + 58*time.Minute, 25 * time.Hour}
	ttls := []time.Duration{3 * time.Minute, time.Hour, 30 * time.Hour}
	rapid.Check(t, func(rt *rapid.T) {
		s := newSynth(rt)
		at := t0
		n := rapid.IntRange(1, 14).Draw(rt, "steps")
		for i := 0; i < n; i++ {
			at = at.Add(rapid.SampledFrom(steps).Draw(rt, "dt"))
			var id string
			switch rapid.IntRange(0, 5).Draw(rt, "id") {
			case 0:
				id = fmt.Sprintf("%024x", i) // undated, as before ADR 0053
			case 1:
				id = receipts.NewRunID(at.Add(-25 * time.Hour)) // stale
			case 2:
				id = receipts.NewRunID(at.Add(10 * time.Minute)) // from the future
			default:
				id = receipts.NewRunID(at)
			}
			switch k := rapid.IntRange(0, 5).Draw(rt, "what"); {
			case k >= 2 || len(s.runs) == 0:
				s.run(rt, at, rapid.SampledFrom(ttls).Draw(rt, "ttl"), rapid.IntRange(1, 2).Draw(rt, "uses"), id, rapid.IntRange(0, 5).Draw(rt, "open") == 0)
			case k == 0: // an approval spent again
				s.again(rt, rapid.IntRange(0, len(s.runs)-1).Draw(rt, "j"), at, id)
			default: // a run id used again
				j := rapid.IntRange(0, len(s.runs)-1).Draw(rt, "j")
				s.run(rt, at, rapid.SampledFrom(ttls).Draw(rt, "ttl"), 1, s.runs[j].intent.RunID, false)
			}
		}
		journal := s.journal()
		rp := &receipts.Replayer{Policy: s.policy}
		keep := &receipts.Replayer{Policy: s.policy}
		receipts.RememberAll(keep)
		got, gotFailed := verdicts(rt, rp, journal)
		want, wantFailed := verdicts(rt, keep, journal)
		if !slices.Equal(got, want) || gotFailed != wantFailed {
			rt.Fatalf("forgetting changed the verdicts:\n got %v (%d failed)\nwant %v (%d failed)", got, gotFailed, want, wantFailed)
		}

		full, fullSum, _ := replayAll(rt, rp, journal, nil)
		cut := rapid.IntRange(1, len(s.lines)).Draw(rt, "cut")
		_, cutSum, st := replayAll(rt, rp, []byte(strings.Join(s.lines[:cut], "\n")+"\n"), nil)
		if st == nil {
			if cutSum.Failed == 0 {
				rt.Fatal("a cut that passed wrote no state")
			}
			return
		}
		resumed, resSum, _ := replayAll(rt, rp, journal, sealed(rt, st))
		if !slices.Equal(resumed, full[cut:]) || resSum != fullSum {
			rt.Fatalf("resumed at %d:\n got %v %+v\nwant %v %+v", cut, resumed, resSum, full[cut:], fullSum)
		}
	})
}

// What replay forgets is what no intent that could pass may need: over
// fifty hours of runs a minute apart on records that live an hour, the
// state at the head keeps the records of the last hour and the run ids
// of the last day, and sweeps along the way delete nothing that a later
// intent is judged by: an approval spent again within its life is still
// evidence_reused, a run id used again within the day still
// run_id_reused, and one from two days ago is refused by its date.
func TestForgettingBoundsState(t *testing.T) {
	s := newSynth(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const runs = 3000
	at := t0
	for i := range runs {
		at = t0.Add(time.Duration(i) * time.Minute)
		ttl := time.Hour
		if i == 10 {
			ttl = 100 * time.Hour // alive at the head, across every sweep
		}
		s.run(t, at, ttl, 1, receipts.NewRunID(at), false)
	}
	rp := &receipts.Replayer{Policy: s.policy}
	_, sum, st := replayAll(t, rp, s.journal(), nil)
	if sum.Failed != 0 || st == nil {
		t.Fatalf("%d failed, state %v", sum.Failed, st != nil)
	}
	// Records live an hour, and are kept MaxClockSkew past it; one lives
	// a hundred hours.
	if n := len(st.Used) / 20; n < 61 || n > 67 {
		t.Errorf("the state keeps %d records' uses, want those of the last hour and five minutes, and one more", n)
	}
	if n := len(st.Runs) / 16; n < 24*60 || n > 24*60+7 {
		t.Errorf("the state keeps %d run ids, want those of the last day and five minutes", n)
	}
	for b := st.Runs; len(b) > 0; b = b[16:] {
		if made := time.UnixMilli(int64(binary.LittleEndian.Uint64(b[8:]))); at.Sub(made) > receipts.RunIDMaxAge+receipts.MaxClockSkew+time.Minute {
			t.Fatalf("the state keeps a run id made %s before the head", at.Sub(made))
		}
	}

	at = at.Add(time.Second)
	s.again(t, runs-30, at, receipts.NewRunID(at))                     // its go spent again, half an hour on
	s.run(t, at, time.Hour, 1, s.runs[runs-23*60].intent.RunID, false) // a run id of 23 hours ago
	s.run(t, at, time.Hour, 1, s.runs[5].intent.RunID, false)          // one of two days ago
	s.again(t, 100, at, receipts.NewRunID(at))                         // a go expired two days ago
	s.again(t, 10, at, receipts.NewRunID(at))                          // a go of two days ago still alive
	codes := problemCodes(t, rp, s.journal())
	first := 2*runs + 1
	want := map[int][]string{
		first:     {receipts.EvidenceReused},
		first + 2: {receipts.RunIDReused},
		first + 4: {receipts.Malformed},
		first + 6: {receipts.GateNotSatisfied},
		first + 8: {receipts.EvidenceReused},
	}
	for line, w := range want {
		if !slices.Contains(codes[line], w[0]) {
			t.Errorf("line %d: problems %v, want %s", line, codes[line], w[0])
		}
	}
	if len(codes) != len(want) {
		t.Errorf("problems on %d lines, want %d: %v", len(codes), len(want), codes)
	}
}

// A record is remembered MaxClockSkew past its expiry, not only until it:
// an intent dated up to MaxClockSkew before the latest time still passes,
// and one dated before the record's expiry may rely on it. Here a go that
// lives ten minutes is spent, a run twelve minutes on moves the latest
// time past the go's expiry, and then an intent dated four minutes back
// (within the skew, two minutes before the expiry) spends the go again:
// that is evidence_reused, never a fresh use of a forgotten record.
func TestForgettingKeepsARecordTheSkewPastItsExpiry(t *testing.T) {
	s := newSynth(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.run(t, t0, 10*time.Minute, 1, receipts.NewRunID(t0), false)
	later := t0.Add(12 * time.Minute)
	s.run(t, later, time.Hour, 1, receipts.NewRunID(later), false)
	back := later.Add(-4 * time.Minute)
	s.again(t, 0, back, receipts.NewRunID(back))
	codes := problemCodes(t, &receipts.Replayer{Policy: s.policy}, s.journal())
	if want := map[int][]string{5: {receipts.EvidenceReused}}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("problems by line %v, want %v", codes, want)
	}
}

// An intent's run id is dated within its intent's time: replay refuses
// one made more than RunIDMaxAge before it or after it, and the journal
// never writes such an intent.
func TestRunIDDate(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	id := receipts.NewRunID(now)
	if len(id) != 32 {
		t.Fatalf("run id %q", id)
	}
	if ms, ok := receipts.RunIDTime(id); !ok || ms != now.UnixMilli() {
		t.Fatalf("run id %s dated %d, %v", id, ms, ok)
	}
	for _, undated := range []string{"", "run-1", fmt.Sprintf("%024x", 7), strings.ToUpper(id), id[:31] + "g"} {
		if _, ok := receipts.RunIDTime(undated); ok {
			t.Errorf("%q read as dated", undated)
		}
	}

	dir := t.TempDir()
	k := keys.FromSeed(bytes.Repeat([]byte{9}, 32))
	for _, tc := range []struct {
		name string
		made time.Time
		ok   bool
	}{
		{"now", now, true},
		{"a day ago", now.Add(-receipts.RunIDMaxAge), true},
		{"a day and a second ago", now.Add(-receipts.RunIDMaxAge - time.Second), false},
		{"within the skew ahead", now.Add(receipts.MaxClockSkew), true},
		{"past the skew ahead", now.Add(receipts.MaxClockSkew + time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &receipts.Journal{Path: filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".jsonl"), Key: k, Runner: "runner", Now: func() time.Time { return now }}
			_, err := j.Append(&receipts.Receipt{Kind: receipts.KindIntent, RunID: receipts.NewRunID(tc.made), Intent: &receipts.Intent{}})
			if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, receipts.ErrRunIDDate) {
				t.Fatalf("append: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
