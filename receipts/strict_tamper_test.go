package receipts_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/receipts"
)

// signBytes signs payload, exactly these bytes, as a receipt with the
// runner key.
func (w *world) signBytes(payload []byte) string {
	w.t.Helper()
	env, err := dsse.Sign(context.Background(), w.runner, receipts.PayloadType, payload)
	if err != nil {
		w.t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	return string(b)
}

// payloadOf is the decoded payload of a journal line.
func payloadOf(t *testing.T, line string) []byte {
	t.Helper()
	var env approval.Envelope
	if err := json.Unmarshal([]byte(line), &env); err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rebuild decodes every line, lets fn change the receipts (drop, edit),
// and signs them all again with the runner key in order: seq, prev and
// the outcomes' intent hashes follow, so only fn's change is wrong.
func (w *world) rebuild(lines []string, fn func(rs []*receipts.Receipt) []*receipts.Receipt) []string {
	w.t.Helper()
	var rs []*receipts.Receipt
	old := map[*receipts.Receipt]string{}
	for _, l := range lines {
		_, r, err := receipts.Decode([]byte(l))
		if err != nil {
			w.t.Fatal(err)
		}
		rs = append(rs, r)
		old[r] = receipts.LineHash([]byte(l))
	}
	rs = fn(rs)
	renamed := map[string]string{}
	var out []string
	prev := ""
	for i, r := range rs {
		r.Seq, r.Prev = uint64(i+1), prev
		if r.Outcome != nil {
			if h, ok := renamed[r.Outcome.Intent]; ok {
				r.Outcome.Intent = h
			}
		}
		line := w.sign(r, w.runner)
		prev = receipts.LineHash([]byte(line))
		if h, ok := old[r]; ok {
			renamed[h] = prev
		}
		out = append(out, line)
	}
	return out
}

// TestTamperStrictPayloads: receipts signed with the real runner key whose
// payload encoding/json would read one way and a strict verifier in
// another language another way, or not at all (docs/REPLAY.md,
// "Strict decoding"). Each is malformed.
func TestTamperStrictPayloads(t *testing.T) {
	w, policy := chWorld(t)
	outcome := payloadOf(t, w.journal[1]) // line 2: run A's outcome, exit 0
	if !bytes.Contains(outcome, []byte(`"exit_code":0`)) {
		t.Fatalf("line 2 is not an outcome with exit 0: %s", outcome)
	}
	swap := func(with string) []byte {
		return bytes.Replace(outcome, []byte(`"exit_code":0`), []byte(with), 1)
	}
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		// Go reads 0 (the last case-folded match wins), Python 1.
		{"a key in another case", swap(`"exit_code":1,"EXIT_CODE":0`)},
		{"only the key in another case", swap(`"Exit_Code":0`)},
		{"a key twice", swap(`"exit_code":1,"exit_code":0`)},
		{"a key twice, one escaped", swap(`"exit_code":1,"exit_cod\u0065":0`)},
		{"null for a number", swap(`"exit_code":null`)},
		{"another object after the payload", append(append([]byte(nil), outcome...), `{"kind":"intent"}`...)},
		{"a newline after the payload", append(append([]byte(nil), outcome...), '\n')},
		{"invalid UTF-8", bytes.Replace(outcome, []byte(`"kind":"outcome"`), []byte("\"kind\":\"outcome\",\"run_id\":\"\xff\""), 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := append([]string(nil), w.journal...)
			lines[1] = w.signBytes(tc.payload)
			res, _ := chReplay(t, policy, nil, lines)
			if got := chProblems(res)["2"]; !slices.Contains(got, receipts.Malformed) {
				t.Fatalf("line 2 (%s): problems %v, want %s", tc.name, got, receipts.Malformed)
			}
		})
	}

	// The envelope line itself is read as strictly, on the fast path and
	// off it.
	for _, tc := range []struct {
		name string
		line func(l string) string
	}{
		{"bytes after the envelope", func(l string) string { return l + `{}` }},
		{"a space after the envelope", func(l string) string { return l + ` ` }},
		{"a key of the envelope twice", func(l string) string {
			return strings.Replace(l, `{"payloadType":`, `{"payloadType":"x","payloadType":`, 1)
		}},
		{"a key of the envelope in another case", func(l string) string {
			return strings.Replace(l, `{"payloadType":`, `{"PayloadType":`, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := append([]string(nil), w.journal...)
			lines[1] = tc.line(lines[1])
			res, _ := chReplay(t, policy, nil, lines)
			if got := chProblems(res)["2"]; !slices.Contains(got, receipts.Malformed) {
				t.Fatalf("line 2 (%s): problems %v, want %s", tc.name, got, receipts.Malformed)
			}
		})
	}
}

// TestTamperTornFinalLine: a final line without its newline is torn, not
// a receipt, though it is a complete, runner-signed one: the next append
// cuts it off.
func TestTamperTornFinalLine(t *testing.T) {
	w, policy := chWorld(t)
	var res []receipts.Result
	rp := &receipts.Replayer{Policy: policy}
	sum, err := rp.Replay(strings.NewReader(strings.Join(w.journal, "\n")), func(r receipts.Result) { res = append(res, r) })
	if err != nil {
		t.Fatal(err)
	}
	chWant(t, res, sum, map[string][]string{"10": {receipts.Torn}})
}

// TestScanLongLine: a line over MaxLine is passed without its bytes, with
// its length and hash, and costs a bounded multiple of MaxLine, not
// twice its size.
func TestScanLongLine(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 4*receipts.MaxLine+5)
	in := io.MultiReader(strings.NewReader("a\n"), bytes.NewReader(long), strings.NewReader("\nb\n"))
	var got []receipts.Line
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := receipts.Scan(in, func(l receipts.Line) error {
		l.Bytes = append([]byte(nil), l.Bytes...)
		got = append(got, l)
		return nil
	})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(long)
	if len(got) != 3 || got[1].Bytes != nil || got[1].Long != int64(len(long)) || got[1].Hash != hex.EncodeToString(sum[:]) || string(got[2].Bytes) != "b" {
		t.Fatalf("lines %+v", got)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 3*receipts.MaxLine {
		t.Fatalf("scanning a %d-byte line allocated %d bytes; want under %d", len(long), alloc, 3*receipts.MaxLine)
	}
}

// TestTamperLongLine: replay reports a line over MaxLine as malformed.
func TestTamperLongLine(t *testing.T) {
	w, policy := chWorld(t)
	lines := append([]string(nil), w.journal...)
	lines[1] = strings.Repeat("x", receipts.MaxLine+1)
	res, _ := chReplay(t, policy, nil, lines)
	got := chProblems(res)
	if !slices.Contains(got["2"], receipts.Malformed) || !strings.Contains(res[1].Problems[0].Detail, "at most") {
		t.Fatalf("problems %v", got)
	}
}

// TestTamperTimeAndIdentity: runner-signed journals whose entries are each
// well formed, but whose times, outcomes or run ids do not hold together.
func TestTamperTimeAndIdentity(t *testing.T) {
	w, policy := chWorld(t)
	for _, tc := range []struct {
		name string
		fn   func(rs []*receipts.Receipt) []*receipts.Receipt
		want map[string][]string
	}{
		{"an outcome dated an hour before the entry before it", func(rs []*receipts.Receipt) []*receipts.Receipt {
			rs[5].Time = rs[4].Time.Add(-time.Hour)
			return rs
		}, map[string][]string{"6": {receipts.TimeBackwards}}},
		{"an outcome naming another run's intent", func(rs []*receipts.Receipt) []*receipts.Receipt {
			rs[3].Outcome.Intent = receipts.LineHash([]byte(w.journal[0]))
			return rs
		}, map[string][]string{"4": {receipts.WrongIntent}}},
		// Run A crashed (its outcome is gone); run B's intent takes A's
		// run id, so that B's outcome would close A.
		{"a run id reused by a later intent", func(rs []*receipts.Receipt) []*receipts.Receipt {
			a := rs[0].RunID
			rs = append(rs[:1], rs[2:]...)
			rs[1].RunID, rs[2].RunID = a, a
			return rs
		}, map[string][]string{"2": {receipts.RunIDReused}, "3": {receipts.WrongIntent}}},
		{"an entry of another host", func(rs []*receipts.Receipt) []*receipts.Receipt {
			rs[6].Host = "elsewhere"
			return rs
		}, map[string][]string{"7": {receipts.WrongHost}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := w.rebuild(w.journal, tc.fn)
			res, sum := chReplay(t, policy, nil, lines)
			chWant(t, res, sum, tc.want)
		})
	}
	// Within the stated skew, a step back is not a problem.
	lines := w.rebuild(w.journal, func(rs []*receipts.Receipt) []*receipts.Receipt {
		rs[5].Time = rs[4].Time.Add(-receipts.MaxClockSkew + time.Second)
		return rs
	})
	if res, sum := chReplay(t, policy, nil, lines); !sum.OK {
		t.Fatalf("a step back within the skew: %v", chProblems(res))
	}
}

// TestTamperOtherHostsJournal: host B's journal with host B's own
// checkpoint, put where host A's is, does not verify as host A's.
func TestTamperOtherHostsJournal(t *testing.T) {
	k, policy := chRunner(t)
	lines := chJournal(t, k, "host-b", 4)
	cp, err := approval.Sign(k, receipts.CheckpointType, receipts.Checkpoint{
		Count: 4, Head: receipts.LineHash([]byte(lines[3])), Time: time.Now().UTC(), Runner: "runner", Host: "host-b"})
	if err != nil {
		t.Fatal(err)
	}
	replay := func(host string) map[string][]string {
		var res []receipts.Result
		rp := &receipts.Replayer{Policy: policy, Checkpoint: cp, Host: host}
		if _, err := rp.Replay(strings.NewReader(strings.Join(lines, "\n")+"\n"), func(r receipts.Result) { res = append(res, r) }); err != nil {
			t.Fatal(err)
		}
		return chProblems(res)
	}
	if got := replay("host-b"); len(got) != 0 {
		t.Fatalf("as host-b's own: %v", got)
	}
	got := replay("host-a")
	for _, at := range []string{"1", "2", "3", "4", "checkpoint"} {
		if !slices.Contains(got[at], receipts.WrongHost) {
			t.Fatalf("as host-a's: %v; want %s on every line and the checkpoint", got, receipts.WrongHost)
		}
	}
}
