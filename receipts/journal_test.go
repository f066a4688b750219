package receipts

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
)

// Helpers here are prefixed jt so they cannot clash with other test files
// of the package.

type jtFixture struct {
	t      *testing.T
	key    *keys.Private
	policy *approval.Policy
	path   string
}

func jtNew(t *testing.T) *jtFixture {
	t.Helper()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return &jtFixture{t: t, key: k, policy: runnerPolicy(t, k), path: filepath.Join(t.TempDir(), "journal", "receipts.jsonl")}
}

// runnerPolicy is a trust policy whose one principal is k, as the runner.
func runnerPolicy(t *testing.T, k *keys.Private) *approval.Policy {
	t.Helper()
	p, err := approval.ParsePolicy("trust.toml", fmt.Appendf(nil, "[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n", k.Public().String()))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *jtFixture) journal() *Journal {
	return &Journal{Path: f.path, Key: f.key, Runner: "runner", Host: "test-host",
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }}
}

// jtEntry is a receipt that needs no plan behind it for Append or replay
// (a repair entry); pad makes its line longer.
func jtEntry(run string, pad int) *Receipt {
	return &Receipt{Kind: KindRepair, RunID: run, Repair: &Repair{SavedAs: strings.Repeat("p", pad)}}
}

func (f *jtFixture) append(r *Receipt) Appended {
	f.t.Helper()
	a, err := f.journal().Append(r)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

func (f *jtFixture) raw() []byte {
	f.t.Helper()
	b, err := os.ReadFile(f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *jtFixture) addRaw(b []byte) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		f.t.Fatal(err)
	}
	fl, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fl.Close()
	if _, err := fl.Write(b); err != nil {
		f.t.Fatal(err)
	}
}

// lines returns the journal's lines, failing on a torn tail.
func (f *jtFixture) lines() [][]byte {
	f.t.Helper()
	b := f.raw()
	if len(b) > 0 && b[len(b)-1] != '\n' {
		f.t.Fatalf("journal ends without a newline: %q", b[max(0, len(b)-40):])
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte{'\n'}), []byte{'\n'})
}

// chain decodes every line, checks each signature, the sequence and the
// prev hashes, and returns the receipts.
func (f *jtFixture) chain() []*Receipt {
	f.t.Helper()
	var out []*Receipt
	prev := ""
	for i, line := range f.lines() {
		env, r, err := Decode(line)
		if err != nil {
			f.t.Fatalf("line %d: %v", i+1, err)
		}
		if err := approval.VerifyWith(f.key.Public(), env); err != nil {
			f.t.Fatalf("line %d: signature: %v", i+1, err)
		}
		if r.Seq != uint64(i+1) || r.Prev != prev {
			f.t.Fatalf("line %d: seq %d prev %.12s, want seq %d prev %.12s", i+1, r.Seq, r.Prev, i+1, prev)
		}
		prev = LineHash(line)
		out = append(out, r)
	}
	return out
}

// replay runs the Replayer over the journal.
func (f *jtFixture) replay() ([]Result, Summary) {
	f.t.Helper()
	fl, err := os.Open(f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fl.Close()
	var res []Result
	sum, err := (&Replayer{Policy: f.policy}).Replay(fl, func(r Result) { res = append(res, r) })
	if err != nil {
		f.t.Fatal(err)
	}
	return res, sum
}

func TestAppendNumbersAndChainsEntries(t *testing.T) {
	f := jtNew(t)
	prev := ""
	for i := 1; i <= 5; i++ {
		r := jtEntry(fmt.Sprint("run", i), 0)
		a := f.append(r)
		if a.Seq != uint64(i) || r.Seq != uint64(i) {
			t.Fatalf("append %d: seq %d (receipt %d)", i, a.Seq, r.Seq)
		}
		if r.Prev != prev {
			t.Fatalf("append %d: prev %q, want %q", i, r.Prev, prev)
		}
		lines := f.lines()
		if len(lines) != i {
			t.Fatalf("%d lines after %d appends", len(lines), i)
		}
		if got := LineHash(lines[i-1]); a.Hash != got {
			t.Fatalf("append %d: hash %s, the line hashes to %s", i, a.Hash, got)
		}
		prev = a.Hash
	}
	rs := f.chain()
	for _, r := range rs {
		if r.Runner != "runner" || r.Host != "test-host" || !r.Time.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Errorf("seq %d: runner %q host %q time %v", r.Seq, r.Runner, r.Host, r.Time)
		}
	}
	if fi, err := os.Stat(f.path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("journal mode: %v %v", fi.Mode(), err)
	}
	if _, sum := f.replay(); sum.Failed != 0 || sum.Entries != 5 {
		t.Errorf("replay %+v", sum)
	}
}

// TestAppendIsSerialised appends from many goroutines at once, each through
// its own Journal (so its own file descriptor and flock): every entry gets
// a distinct sequence number and the chain stays intact.
func TestAppendIsSerialised(t *testing.T) {
	f := jtNew(t)
	const writers, each = 32, 8
	var wg sync.WaitGroup
	seqs := make(chan uint64, writers*each)
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				a, err := f.journal().Append(jtEntry(fmt.Sprintf("w%d-%d", w, i), w*37%500))
				if err != nil {
					errs <- err
					return
				}
				seqs <- a.Seq
			}
		})
	}
	wg.Wait()
	close(seqs)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for s := range seqs {
		if seen[s] {
			t.Fatalf("sequence %d handed out twice", s)
		}
		seen[s] = true
	}
	rs := f.chain()
	if len(rs) != writers*each || len(seen) != writers*each {
		t.Fatalf("%d entries, %d sequence numbers; want %d", len(rs), len(seen), writers*each)
	}
	runs := map[string]bool{}
	for _, r := range rs {
		runs[r.RunID] = true
	}
	if len(runs) != writers*each {
		t.Errorf("%d distinct receipts, want %d", len(runs), writers*each)
	}
}

func TestAppendRepairsATornTail(t *testing.T) {
	for _, tc := range []struct {
		name  string
		good  int    // complete entries before the tear
		torn  []byte // what the crash left
		large bool   // make entries larger than readTail's first chunk
	}{
		{"half an entry", 3, []byte(`{"payloadType":"application/vnd.prod-write.receipt+json","payload":"eyJr`), false},
		{"one byte", 2, []byte(`{`), false},
		{"a whole entry without its newline", 2, nil, false},
		{"the only line", 0, []byte(`{"payloadType":"appl`), false},
		{"torn tail longer than the read chunk", 2, bytes.Repeat([]byte("z"), 150<<10), false},
		{"entries longer than the read chunk", 3, []byte(`{"payl`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := jtNew(t)
			pad := 0
			if tc.large {
				pad = 100 << 10
			}
			for i := range tc.good {
				f.append(jtEntry(fmt.Sprint("good", i), pad))
			}
			var before []byte
			if tc.good > 0 {
				before = f.raw()
			}
			torn := tc.torn
			if torn == nil {
				// A complete, signed entry whose newline never made it.
				tmp := jtNew(t)
				tmp.key = f.key
				tmp.append(jtEntry("lost", 0))
				torn = bytes.TrimSuffix(tmp.raw(), []byte{'\n'})
			}
			f.addRaw(torn)

			a := f.append(jtEntry("after", 0))
			if want := uint64(tc.good + 2); a.Seq != want {
				t.Errorf("new entry has seq %d, want %d (after a repair entry)", a.Seq, want)
			}
			after := f.raw()
			if !bytes.HasPrefix(after, before) {
				t.Fatal("entries before the tear changed")
			}
			rs := f.chain()
			if len(rs) != tc.good+2 {
				t.Fatalf("%d entries, want %d", len(rs), tc.good+2)
			}
			rep := rs[tc.good]
			if rep.Kind != KindRepair || rep.Repair == nil {
				t.Fatalf("entry %d is %q, want a repair", tc.good+1, rep.Kind)
			}
			if rep.Repair.Offset != int64(len(before)) || rep.Repair.Dropped != int64(len(torn)) || rep.Repair.SHA256 != "sha256:"+LineHash(torn) {
				t.Errorf("repair %+v; want offset %d, %d bytes, their sha256", rep.Repair, len(before), len(torn))
			}
			saved, err := os.ReadFile(filepath.Join(filepath.Dir(f.path), rep.Repair.SavedAs))
			if err != nil {
				t.Fatalf("torn bytes not kept: %v", err)
			}
			if !bytes.Equal(saved, torn) {
				t.Errorf("kept %d bytes that differ from the %d torn ones", len(saved), len(torn))
			}
			if rs[tc.good+1].RunID != "after" {
				t.Errorf("last entry is %q", rs[tc.good+1].RunID)
			}
			if _, sum := f.replay(); !sum.OK || sum.Entries != tc.good+2 {
				t.Errorf("replay after the repair: %+v", sum)
			}

			// The repaired journal takes further appends normally.
			if a := f.append(jtEntry("later", 0)); a.Seq != uint64(tc.good+3) {
				t.Errorf("next seq %d", a.Seq)
			}
			if n := len(f.chain()); n != tc.good+3 {
				t.Errorf("%d entries", n)
			}
		})
	}
}

// TestAppendAfterGarbage: a journal whose last complete line is not a
// receipt (a bad edit, a foreign tool) still takes appends, chained to that
// line's hash and numbered as replay counts lines, so replay flags the
// garbage line and nothing else.
func TestAppendAfterGarbage(t *testing.T) {
	for _, garbage := range []string{"not json at all\n", "{\"payloadType\":\"x\"}\n", "garbage one\ngarbage two\n"} {
		t.Run(strings.TrimSpace(strings.SplitN(garbage, "\n", 2)[0]), func(t *testing.T) {
			f := jtNew(t)
			f.append(jtEntry("a", 0))
			f.append(jtEntry("b", 0))
			f.addRaw([]byte(garbage))
			n := strings.Count(garbage, "\n")
			last := strings.Split(strings.TrimSuffix(garbage, "\n"), "\n")[n-1]

			r := jtEntry("c", 0)
			a := f.append(r)
			if want := uint64(2 + n + 1); a.Seq != want {
				t.Errorf("seq %d, want %d", a.Seq, want)
			}
			if r.Prev != LineHash([]byte(last)) {
				t.Errorf("prev %.12s, want the hash of the garbage line %.12s", r.Prev, LineHash([]byte(last)))
			}
			res, sum := f.replay()
			if sum.Entries != 3+n || sum.Failed != n {
				t.Errorf("replay %+v, want %d entries, %d failed", sum, 3+n, n)
			}
			for _, x := range res {
				for _, p := range x.Problems {
					if p.Code != Malformed {
						t.Errorf("line %d: %s: %s", x.Line, p.Code, p.Detail)
					}
				}
			}
			if got := res[len(res)-1]; !got.OK {
				t.Errorf("the entry after the garbage does not verify: %+v", got)
			}
		})
	}
}

// TestAppendFindsTheTailOfALongJournal: the tail is read backwards in
// chunks; with lines of many sizes on both sides of a chunk boundary the
// next entry still gets the right sequence and prev hash.
func TestAppendFindsTheTailOfALongJournal(t *testing.T) {
	f := jtNew(t)
	sizes := []int{10, 40 << 10, 30 << 10, 70 << 10, 5, 64 << 10, 300 << 10, 1}
	for i, s := range sizes {
		f.append(jtEntry(fmt.Sprint(i), s))
	}
	if n := len(f.chain()); n != len(sizes) {
		t.Fatalf("%d entries", n)
	}
	// And after garbage lines long enough to push the last good entry out
	// of the first chunk.
	f.addRaw(append(bytes.Repeat([]byte("g"), 100<<10), '\n'))
	r := jtEntry("last", 0)
	if a := f.append(r); a.Seq != uint64(len(sizes)+2) {
		t.Errorf("seq %d after a long garbage line, want %d", a.Seq, len(sizes)+2)
	}
}

// TestAppendAfterALongLine: a line longer than MaxLine is no receipt to
// replay, whatever it holds; Append counts it so too, and chains to its
// hash, so the entry after it verifies. (Append once read the sequence
// number such a line claimed, and the next entry broke the chain.)
func TestAppendAfterALongLine(t *testing.T) {
	f := jtNew(t)
	f.append(jtEntry("a", 0))
	long, err := f.journal().sign(&Receipt{Kind: KindRepair, Seq: 7, Repair: &Repair{SavedAs: strings.Repeat("p", MaxLine)}})
	if err != nil {
		t.Fatal(err)
	}
	f.addRaw(append(long, '\n'))
	r := jtEntry("c", 0)
	if a := f.append(r); a.Seq != 3 || r.Prev != LineHash(long) {
		t.Errorf("seq %d prev %.12s after a long line, want seq 3 prev %.12s", a.Seq, r.Prev, LineHash(long))
	}
	res, sum := f.replay()
	if sum.Entries != 3 || sum.Failed != 1 || !res[2].OK {
		t.Errorf("replay %+v, the last entry %+v: want only the long line to fail", sum, res[2])
	}
}

func TestScan(t *testing.T) {
	long := strings.Repeat("L", 600<<10) // longer than Scan's buffer
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"one line", "a\n", []string{"a"}},
		{"final line without newline", "a\nb\nc", []string{"a", "b", "c"}},
		{"empty line kept", "a\n\nb\n", []string{"a", "", "b"}},
		{"long line", "a\n" + long + "\nb\n", []string{"a", long, "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := Scan(strings.NewReader(tc.in), func(l Line) error {
				if l.No != len(got)+1 {
					t.Errorf("line numbered %d, want %d", l.No, len(got)+1)
				}
				got = append(got, string(l.Bytes))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d lines, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("line %d: %.20q, want %.20q", i+1, got[i], tc.want[i])
				}
			}
		})
	}

	stop := errors.New("stop")
	calls := 0
	err := Scan(strings.NewReader("a\nb\nc\n"), func(Line) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("Scan returned %v after %d calls; want the callback's error after 1", err, calls)
	}
}

func TestDecode(t *testing.T) {
	f := jtNew(t)
	f.append(jtEntry("run", 0))
	line := f.lines()[0]
	env, r, err := Decode(line)
	if err != nil {
		t.Fatal(err)
	}
	if env.PayloadType != PayloadType || r.Kind != KindRepair || r.RunID != "run" || r.Seq != 1 || r.Repair == nil {
		t.Errorf("decoded %+v", r)
	}

	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	reenvelope := func(payloadType string, p []byte, enc *base64.Encoding) []byte {
		e := *env
		e.PayloadType = payloadType
		e.Payload = enc.EncodeToString(p)
		b, _ := json.Marshal(&e)
		return b
	}
	var withExtra map[string]any
	json.Unmarshal(payload, &withExtra)
	withExtra["smuggled"] = true
	extra, _ := json.Marshal(withExtra)
	for _, tc := range []struct {
		name string
		line []byte
	}{
		{"not JSON", []byte("not json")},
		{"empty", nil},
		{"another payload type", reenvelope("application/vnd.prod-write.plan+json", payload, base64.StdEncoding)},
		{"payload not base64", []byte(`{"payloadType":"` + PayloadType + `","payload":"%%%","signatures":[]}`)},
		{"unpadded base64", reenvelope(PayloadType, payload[:len(payload)-1], base64.RawStdEncoding)},
		{"payload not JSON", reenvelope(PayloadType, []byte("nope"), base64.StdEncoding)},
		{"unknown field in the payload", reenvelope(PayloadType, extra, base64.StdEncoding)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Decode(tc.line); err == nil {
				t.Errorf("Decode accepted %.60q", tc.line)
			}
		})
	}
}
