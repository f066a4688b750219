package receipts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// tb is what these helpers need of a test, a rapid one included.
type tb interface {
	Helper()
	Fatal(args ...any)
}

// stateKey is the key CI seals replay states with, in these tests.
var stateKey = keys.FromSeed(bytes.Repeat([]byte{42}, 32))

// replayAll replays journal in full, returning each verdict as JSON.
func replayAll(t tb, rp *receipts.Replayer, journal []byte, s *receipts.ReplayState) ([]string, receipts.Summary, *receipts.ReplayState) {
	t.Helper()
	return replayFrom(t, rp, bytes.NewReader(journal), s)
}

// replayFrom is replayAll of the journal read from r.
func replayFrom(t tb, rp *receipts.Replayer, r io.Reader, s *receipts.ReplayState) ([]string, receipts.Summary, *receipts.ReplayState) {
	t.Helper()
	var out []string
	sum, st, err := rp.ReplayFrom(r, s, func(r receipts.Result) {
		b, _ := json.Marshal(r)
		out = append(out, string(b))
	})
	var nr *receipts.NotReceiptsError
	if err != nil && !errors.As(err, &nr) {
		t.Fatal(err)
	}
	if err != nil && st != nil {
		t.Fatal("input that is not receipts wrote a state")
	}
	return out, sum, st
}

// sealed is s through its file: sealed, then opened as the next replay
// opens it.
func sealed(t tb, s *receipts.ReplayState) *receipts.ReplayState {
	t.Helper()
	b, err := receipts.SealReplayState(context.Background(), stateKey, s)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := receipts.OpenReplayState(b, stateKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	return s2
}

// Incremental replay gives a full replay's verdicts: over a journal made
// by real runs, tampered or not, cut at a random line, the replay of the
// cut journal writes a state (when no entry failed), and the replay of
// the whole journal from that state emits exactly the verdicts the full
// replay emits after the cut, with the same summary. A cut journal whose
// replay failed writes no state, and the next replay is a full one.
func TestIncrementalReplayAsFull(t *testing.T) {
	t.Run("runs", func(t *testing.T) { incrementalAsFull(t, newWorld(t)) })
	// A break-glass run, a run on a Gera go, and the review of the
	// break-glass run: break-glass runs and their reviews cross the cut.
	t.Run("break-glass", func(t *testing.T) {
		w, _ := newReviewWorld(t)
		incrementalAsFull(t, w)
	})
}

func incrementalAsFull(t *testing.T, w *world) {
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		lines := append([]string(nil), w.journal...)
		n := len(lines)
		torn := false
		switch rapid.IntRange(0, 7).Draw(rt, "tamper") {
		case 1: // a line dropped
			i := rapid.IntRange(0, n-1).Draw(rt, "i")
			lines = append(lines[:i:i], lines[i+1:]...)
		case 2: // two lines swapped
			i, j := rapid.IntRange(0, n-1).Draw(rt, "i"), rapid.IntRange(0, n-1).Draw(rt, "j")
			lines[i], lines[j] = lines[j], lines[i]
		case 3: // a line repeated
			i := rapid.IntRange(0, n-1).Draw(rt, "i")
			lines = append(lines[:i+1:i+1], lines[i:]...)
		case 4: // a receipt edited and the rest re-chained and re-signed
			i := rapid.IntRange(0, n-1).Draw(rt, "i")
			lines = w.edit(lines, i, w.runner, true, func(r *receipts.Receipt) { r.Time = r.Time.Add(-time.Hour) })
		case 5: // the last line torn
			torn = true
		case 6: // a line that is no receipt
			i := rapid.IntRange(0, n-1).Draw(rt, "i")
			lines[i] = `{"not":"a receipt"}`
		case 7: // an intent's approval and run id spent again at the end,
			// chained on and signed by the runner: caught across a cut
			// only by what the state carries
			i := 2 * rapid.IntRange(0, n/2-1).Draw(rt, "intent")
			_, r, err := receipts.Decode([]byte(lines[i]))
			if err != nil || r.Kind != receipts.KindIntent {
				rt.Fatalf("line %d is no intent: %v", i, err)
			}
			_, last, err := receipts.Decode([]byte(lines[n-1]))
			if err != nil {
				rt.Fatal(err)
			}
			r.Seq, r.Prev, r.Time = last.Seq+1, receipts.LineHash([]byte(lines[n-1])), last.Time
			lines = append(lines, w.sign(r, w.runner))
		}
		journal := []byte(strings.Join(lines, "\n") + "\n")
		if torn {
			journal = journal[:len(journal)-1]
		}
		rp := &receipts.Replayer{Policy: policy}
		full, fullSum, _ := replayAll(rt, rp, journal, nil)

		cut := rapid.IntRange(1, len(lines)).Draw(rt, "cut")
		// The journal's own first cut lines, as they were when CI last
		// replayed it.
		prefix := bytes.Join(bytes.SplitAfter(journal, []byte("\n"))[:cut], nil)
		_, cutSum, s := replayAll(rt, rp, prefix, nil)
		if s != nil && cutSum.Failed > 0 {
			rt.Fatalf("a cut journal with %d failed entries wrote state %v", cutSum.Failed, s != nil)
		}
		skip := 0
		if s != nil {
			s = sealed(rt, s)
			skip = cut
		}
		incr, incrSum, _ := replayAll(rt, rp, journal, s)
		if incrSum != fullSum {
			rt.Fatalf("cut at %d: incremental summary %+v, full %+v", cut, incrSum, fullSum)
		}
		if strings.Join(incr, "\n") != strings.Join(full[skip:], "\n") {
			rt.Fatalf("cut at %d: incremental verdicts\n%s\nfull verdicts after the cut\n%s", cut, strings.Join(incr, "\n"), strings.Join(full[skip:], "\n"))
		}
		// With a checkpoint note of the journal's own tree, signed by the
		// runner as the service signs its head, the resumed replay reads
		// the journal from the state's offset only (seek): the verdicts
		// are still the full replay's with that note.
		if s == nil || torn {
			return
		}
		withNote := &receipts.Replayer{Policy: policy, CheckpointNote: noteOf(rt, w, journal)}
		full, fullSum, _ = replayAll(rt, withNote, journal, nil)
		rs := &readsFrom{Reader: bytes.NewReader(journal), first: -1}
		incr, incrSum, _ = replayFrom(rt, withNote, rs, s)
		if incrSum != fullSum || strings.Join(incr, "\n") != strings.Join(full[skip:], "\n") {
			rt.Fatalf("cut at %d, with a note: incremental %+v\n%s\nfull %+v after the cut\n%s", cut, incrSum, strings.Join(incr, "\n"), fullSum, strings.Join(full[skip:], "\n"))
		}
		if rs.first != s.Offset-1 {
			rt.Fatalf("cut at %d, with a note: the replay read from byte %d, not from the state's offset %d", cut, rs.first, s.Offset)
		}
	})
}

// noteOf is the runner's checkpoint note of journal's whole tree, as the
// service signs its head.
func noteOf(t tb, w *world, journal []byte) []byte {
	t.Helper()
	tree, err := receipts.TreeOf(bytes.NewReader(journal))
	if err != nil {
		t.Fatal(err)
	}
	_, r, err := receipts.Decode([]byte(w.journal[0]))
	if err != nil {
		t.Fatal(err)
	}
	note, err := receipts.SignNoteCheckpoint(w.runner, receipts.NoteOrigin(r.Host), tree, tree.Size())
	if err != nil {
		t.Fatal(err)
	}
	return note
}

// readsFrom is a journal that records the first offset read from it.
type readsFrom struct {
	*bytes.Reader
	first int64 // -1 until the first read
}

func (r *readsFrom) Read(p []byte) (int, error) {
	if r.first < 0 {
		r.first, _ = r.Seek(0, io.SeekCurrent)
	}
	return r.Reader.Read(p)
}

// A journal rewritten in the part a state stands on, and signed again as
// a note of its own tree by the runner key (whose holder rewrote it), is
// refused by a resumed replay that seeks past that part: the state's tree
// extended by the new entries is not the note's. The same with no seek
// (no note) is refused as before.
func TestResumedSeekCatchesRewrittenPrefix(t *testing.T) {
	w := newWorld(t)
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	genuine := []byte(strings.Join(w.journal, "\n") + "\n")
	cut := len(w.journal) / 2
	prefix := bytes.Join(bytes.SplitAfter(genuine, []byte("\n"))[:cut], nil)
	_, _, s := replayAll(t, &receipts.Replayer{Policy: policy}, prefix, nil)
	if s == nil {
		t.Fatal("the prefix wrote no state")
	}
	s = sealed(t, s)
	// The first receipt back-dated, every later one re-chained and
	// re-signed: a valid journal of the same length on its own.
	rewritten := []byte(strings.Join(w.edit(append([]string(nil), w.journal...), 0, w.runner, true, func(r *receipts.Receipt) { r.Time = r.Time.Add(-time.Minute) }), "\n") + "\n")
	if len(rewritten) != len(genuine) {
		t.Logf("the rewrite changed the journal's length (%d → %d bytes)", len(genuine), len(rewritten))
	}
	withNote := &receipts.Replayer{Policy: policy, CheckpointNote: noteOf(t, w, rewritten)}
	if _, sum, _ := replayAll(t, withNote, rewritten, nil); !sum.OK {
		t.Fatalf("the rewritten journal does not verify alone: %+v", sum)
	}
	rs := &readsFrom{Reader: bytes.NewReader(rewritten), first: -1}
	out, sum, next := replayFrom(t, withNote, rs, s)
	if sum.OK || next != nil || !strings.Contains(strings.Join(out, "\n"), `"code":"chain_broken"`) {
		t.Fatalf("a rewritten prefix passed a resumed replay with its own note: %+v\n%s", sum, strings.Join(out, "\n"))
	}
	// One entry of the prefix re-signed in place, not re-chained: the
	// entries after the state chain on as before, so only the note's
	// tree (of the journal as it now is) tells the state's apart.
	inPlace := []byte(strings.Join(w.edit(append([]string(nil), w.journal...), 0, w.runner, false, func(r *receipts.Receipt) { r.Time = r.Time.Add(-time.Minute) }), "\n") + "\n")
	withNote.CheckpointNote = noteOf(t, w, inPlace)
	rs = &readsFrom{Reader: bytes.NewReader(inPlace), first: -1}
	out, sum, next = replayFrom(t, withNote, rs, s)
	if sum.OK || next != nil || rs.first != s.Offset-1 || !strings.Contains(strings.Join(out, "\n"), "not the tree the checkpoint note signs") {
		t.Fatalf("a prefix entry re-signed in place passed a resumed replay with its own note (read from %d): %+v\n%s", rs.first, sum, strings.Join(out, "\n"))
	}
	// Against the genuine journal and its note, the same state passes,
	// reading from its offset.
	withNote.CheckpointNote = noteOf(t, w, genuine)
	rs = &readsFrom{Reader: bytes.NewReader(genuine), first: -1}
	if out, sum, _ := replayFrom(t, withNote, rs, s); !sum.OK || rs.first != s.Offset-1 {
		t.Fatalf("the genuine journal, resumed with its note: %+v, read from %d (offset %d)\n%s", sum, rs.first, s.Offset, strings.Join(out, "\n"))
	}
	// A note of fewer entries than the state stands on names a tree
	// inside the prefix: the journal is read from its start, and passes.
	tree, err := receipts.TreeOf(bytes.NewReader(genuine))
	if err != nil {
		t.Fatal(err)
	}
	_, r0, _ := receipts.Decode([]byte(w.journal[0]))
	if withNote.CheckpointNote, err = receipts.SignNoteCheckpoint(w.runner, receipts.NoteOrigin(r0.Host), tree, uint64(cut-1)); err != nil {
		t.Fatal(err)
	}
	rs = &readsFrom{Reader: bytes.NewReader(genuine), first: -1}
	if out, sum, _ := replayFrom(t, withNote, rs, s); !sum.OK || rs.first != 0 {
		t.Fatalf("resumed with a note inside the prefix: %+v, read from %d\n%s", sum, rs.first, strings.Join(out, "\n"))
	}
}

// A state file is believed only as sealed: one with any byte of its state
// changed, re-encoded, sealed by another key, or not a state at all is
// refused. A state judged by another replayer (another policy or option)
// is not reused.
func TestReplayStateEditedRefused(t *testing.T) {
	w := newWorld(t)
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	rp := &receipts.Replayer{Policy: policy}
	journal := []byte(strings.Join(w.journal, "\n") + "\n")
	_, _, s := replayAll(t, rp, journal, nil)
	if s == nil {
		t.Fatal("a journal that verifies wrote no state")
	}
	b, err := receipts.SealReplayState(context.Background(), stateKey, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receipts.OpenReplayState(b, stateKey.Public()); err != nil {
		t.Fatal(err)
	}
	var env struct {
		PayloadType string `json:"payloadType"`
		Payload     []byte `json:"payload"`
		Signatures  []struct {
			KeyID string `json:"keyid"`
			Sig   string `json:"sig"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	reseal := func(payload []byte) []byte {
		e := env
		e.Payload = payload
		out, _ := json.Marshal(e)
		return out
	}
	// Spent uses forgotten: the edit a reuse hides behind.
	var doc map[string]any
	if err := json.Unmarshal(env.Payload, &doc); err != nil {
		t.Fatal(err)
	}
	doc["used"] = ""
	forgot, _ := json.Marshal(doc)
	// Sealed by the key, but not as a state, or a state no replay
	// wrote (packed hashes cut short): refused, not restored.
	doc["used"] = []byte{1, 2, 3, 4, 5}
	short, _ := json.Marshal(doc)
	shortSealed, err := dsse.Sign(context.Background(), stateKey, receipts.ReplayStateType, short)
	if err != nil {
		t.Fatal(err)
	}
	shortFile, _ := json.Marshal(shortSealed)
	otherType, err := dsse.Sign(context.Background(), stateKey, "application/vnd.in-toto+json", env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	otherTypeFile, _ := json.Marshal(otherType)
	other := keys.FromSeed(bytes.Repeat([]byte{43}, 32))
	byOther, err := receipts.SealReplayState(context.Background(), other, s)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), env.Payload...)
	flipped[len(flipped)/2] ^= 1
	for name, file := range map[string][]byte{
		"uses forgotten":        reseal(forgot),
		"a byte flipped":        reseal(flipped),
		"sealed by another key": byOther,
		"not a state":           []byte("{}\n"),
		"hashes cut short":      shortFile,
		"another payload type":  otherTypeFile,
		"empty":                 nil,
	} {
		var ref *receipts.StateRefusedError
		if _, err := receipts.OpenReplayState(file, stateKey.Public()); !errors.As(err, &ref) {
			t.Errorf("%s: %v, want it refused", name, err)
		}
	}
	strict := &receipts.Replayer{Policy: policy, StrictRevocation: true}
	var ref *receipts.StateRefusedError
	if _, _, err := strict.ReplayFrom(bytes.NewReader(journal), s, func(receipts.Result) {}); !errors.As(err, &ref) {
		t.Errorf("a state judged without --strict-revocation, resumed with it: %v", err)
	}
}

// The journal a state stands on rewritten or cut after it was written
// fails the resumed replay, as against a kept checkpoint: the first
// entries are hashed again, not verified again.
func TestReplayStatePrefixChanged(t *testing.T) {
	w := newWorld(t)
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	rp := &receipts.Replayer{Policy: policy}
	_, _, s := replayAll(t, rp, []byte(strings.Join(w.journal[:6], "\n")+"\n"), nil)
	if s == nil {
		t.Fatal("no state")
	}
	// Rewritten and re-signed, the entries after it left as they were:
	// only the tree tells (a full replay finds the chain broken there).
	rewritten := w.edit(w.journal, 1, w.runner, false, func(r *receipts.Receipt) { r.Time = r.Time.Add(time.Second) })
	for name, c := range map[string]struct {
		journal string
		want    string
	}{
		"rewritten": {strings.Join(rewritten, "\n") + "\n", "not the tree the replay state stands on"},
		"cut":       {strings.Join(w.journal[:4], "\n") + "\n", `"code":"` + receipts.Truncated + `"`},
		"torn":      {strings.Join(w.journal[:6], "\n"), `"code":"` + receipts.Torn + `"`},
	} {
		out, sum, next := replayAll(t, rp, []byte(c.journal), s)
		if sum.OK || next != nil || !strings.Contains(strings.Join(out, "\n"), c.want) {
			t.Errorf("%s: %+v, state %v\n%s", name, sum, next != nil, strings.Join(out, "\n"))
		}
	}
}

// A state restored and saved again, with nothing new in between, is the
// same state, field by field: what restore reads is what save wrote
// (sign counts included, which the property's journals have none of).
func TestReplayStateRoundTrip(t *testing.T) {
	w := newWorld(t)
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	rp := &receipts.Replayer{Policy: policy}
	// Cut after an intent: a run in flight at the head.
	prefix := []byte(strings.Join(w.journal[:5], "\n") + "\n")
	_, _, s := replayAll(t, rp, prefix, nil)
	if s == nil || len(s.Open) != 1 || len(s.Used) == 0 || len(s.Runs) == 0 {
		t.Fatalf("state %+v", s)
	}
	s.SignCounts = []receipts.SpentSignCount{{Credential: "cred-a", Count: 7, Line: 3}, {Credential: "cred-b", Count: 0, Line: 5}}
	s = sealed(t, s)
	_, _, again := replayAll(t, rp, prefix, s)
	a, _ := json.Marshal(s)
	b, _ := json.Marshal(again)
	if !bytes.Equal(a, b) {
		t.Errorf("restored and saved:\n%s\nwas\n%s", b, a)
	}
}
