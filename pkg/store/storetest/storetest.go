// Package storetest is the conformance suite of [store.Store]: the
// behaviour every backend must show, the embedded directory store and the
// DynamoDB one alike (docs/DESIGN.md §10). A backend's test calls [RunConformance]
// with a function that opens a fresh, empty store:
//
//	func TestConformance(t *testing.T) {
//		storetest.RunConformance(t, func(t *testing.T) store.Store { … })
//	}
//
// The suite checks the contract of the interface only; what is particular
// to a backend (files on disk, several processes sharing a directory) is
// tested next to it.
package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prod-write/prod-write/pkg/dsse"

	"github.com/prod-write/prod-write/pkg/store"
)

// Goroutines is how many concurrent consumers race for one single-use
// record.
const Goroutines = 32

// Envelope returns a well-formed DSSE envelope with payload body. The
// store does not verify signatures (trust comes from them, not from the
// store), so the signature is arbitrary but well-formed.
func Envelope(body string) *dsse.Envelope {
	sig := sha256.Sum256([]byte("sig:" + body))
	return &dsse.Envelope{
		PayloadType: "application/vnd.prod-write.test+json",
		Payload:     base64.StdEncoding.EncodeToString([]byte(body)),
		Signatures:  []dsse.Signature{{KeyID: strings.Repeat("0", 64), Sig: base64.StdEncoding.EncodeToString(append(sig[:], sig[:]...))}},
	}
}

// Fingerprint returns a well-formed fingerprint derived from s.
func Fingerprint(s string) string {
	sum := sha256.Sum256([]byte("fp:" + s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ID returns a well-formed record id derived from s.
func ID(s string) string {
	sum := sha256.Sum256([]byte("id:" + s))
	return hex.EncodeToString(sum[:])
}

// RunID returns a well-formed run id derived from s.
func RunID(s string) string {
	sum := sha256.Sum256([]byte("run:" + s))
	return hex.EncodeToString(sum[:12])
}

// runs hands out a new run id at each call, as each prod-write run has its
// own.
var runs atomic.Int64

// NewRun returns a run id not handed out before in this process.
func NewRun() string { return RunID(fmt.Sprint("run-", runs.Add(1))) }

// BadRunIDs are strings no store may accept as a run id.
var BadRunIDs = []string{
	"",
	"abc",
	strings.Repeat("a", 65),
	strings.Repeat("A", 24),
	"../" + strings.Repeat("a", 21),
	strings.Repeat("a", 23) + "/",
	strings.Repeat("a", 23) + "\x00",
	strings.Repeat("a", 23) + ".",
	strings.Repeat("a", 23) + " ",
}

// BadFingerprints are strings no store may accept as a fingerprint: each
// could name another file, key or object than the plan's own.
var BadFingerprints = []string{
	"",
	"sha256:",
	"sha256:../../etc",
	"sha256:../../../../../../etc/passwd",
	"sha256:" + strings.Repeat("a", 63),
	"sha256:" + strings.Repeat("a", 65),
	"sha256:" + strings.Repeat("A", 64),
	"sha256:" + strings.Repeat("a", 63) + "A",
	"sha256:" + strings.Repeat("a", 63) + "g",
	"sha256:" + strings.Repeat("a", 62) + "/a",
	"sha256:" + strings.Repeat("a", 62) + "\x00a",
	"sha256:" + strings.Repeat("a", 64) + "\n",
	"SHA256:" + strings.Repeat("a", 64),
	"sha512:" + strings.Repeat("a", 64),
	strings.Repeat("a", 64),
	" sha256:" + strings.Repeat("a", 64),
}

// BadIDs are strings no store may accept as a record id.
var BadIDs = []string{
	"",
	"..",
	"../" + strings.Repeat("a", 61),
	strings.Repeat("a", 63),
	strings.Repeat("A", 64),
	strings.Repeat("a", 63) + "/",
	strings.Repeat("a", 64) + ".json",
	"sha256:" + strings.Repeat("a", 64),
}

func same(a, b *dsse.Envelope) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// RunConformance runs the whole suite against stores made by open, which
// must return a new, empty store each time it is called.
func RunConformance(t *testing.T, open func(t *testing.T) store.Store) {
	RunConformanceWith(t, open, Options{})
}

// Options adjust a conformance run.
type Options struct {
	// Skip maps the name of a test of the suite to why it is skipped for
	// this backend: a known bug, named so that it is not forgotten.
	Skip map[string]string
}

// RunConformanceWith is [RunConformance] with options.
func RunConformanceWith(t *testing.T, open func(t *testing.T) store.Store, o Options) {
	for _, c := range []struct {
		name string
		test func(*testing.T, store.Store)
	}{
		{"Plans", testPlans},
		{"BadFingerprints", testBadFingerprints},
		{"Evidence", testEvidence},
		{"EvidenceNeverOverwritten", testEvidenceNeverOverwritten},
		{"ConsumeOnce", testConsumeOnce},
		{"ConsumeUses", testConsumeUses},
		{"ConcurrentConsumeOnce", testConcurrentConsumeOnce},
		{"ConcurrentConsumeUses", testConcurrentConsumeUses},
		{"ConcurrentConsumeMany", testConcurrentConsumeMany},
		{"ConsumeIdempotent", testConsumeIdempotent},
		{"ConcurrentConsumeRetried", testConcurrentConsumeRetried},
		{"ConcurrentConsumeAllUses", testConcurrentConsumeAllUses},
		{"ConcurrentPutPlan", testConcurrentPutPlan},
		{"ConcurrentPutEvidence", testConcurrentPutEvidence},
		{"BreakGlassByPrincipal", testBreakGlassByPrincipal},
		{"SignCountAdvance", testSignCountAdvance},
		{"ConcurrentSignCountSame", testConcurrentSignCountSame},
		{"ConcurrentSignCountMany", testConcurrentSignCountMany},
		{"Content", testContent},
		{"ConcurrentPutContent", testConcurrentPutContent},
	} {
		t.Run(c.name, func(t *testing.T) {
			if why, skip := o.Skip[c.name]; skip {
				t.Skip(why)
			}
			c.test(t, open(t))
		})
	}
}

func testPlans(t *testing.T, s store.Store) {
	fp := Fingerprint("plan")
	if _, err := s.GetPlan(fp); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetPlan of nothing: %v, want ErrNotFound", err)
	}
	a, b := Envelope(`{"plan":"a"}`), Envelope(`{"plan":"b"}`)
	if err := s.PutPlan(fp, a); err != nil {
		t.Fatalf("PutPlan: %v", err)
	}
	if err := s.PutPlan(fp, a); err != nil {
		t.Fatalf("PutPlan of the same bytes again: %v, want nil (idempotent)", err)
	}
	if err := s.PutPlan(fp, b); !errors.Is(err, store.ErrExists) {
		t.Fatalf("PutPlan of other bytes under the same fingerprint: %v, want ErrExists", err)
	}
	got, err := s.GetPlan(fp)
	if err != nil || !same(got, a) {
		t.Fatalf("GetPlan = %+v, %v; want the first plan, unchanged", got, err)
	}
	if _, err := s.GetPlan(Fingerprint("other")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetPlan of another fingerprint: %v, want ErrNotFound", err)
	}
}

func testBadFingerprints(t *testing.T, s store.Store) {
	env := Envelope(`{}`)
	for _, fp := range BadFingerprints {
		if err := store.CheckFingerprint(fp); err == nil {
			t.Errorf("CheckFingerprint(%q) accepts it", fp)
		} else {
			var bad *store.BadFingerprintError
			if !errors.As(err, &bad) || bad.FP != fp {
				t.Errorf("CheckFingerprint(%q) = %v, want a *BadFingerprintError naming it", fp, err)
			}
		}
		if err := s.PutPlan(fp, env); err == nil {
			t.Errorf("PutPlan(%q) accepts it", fp)
		}
		if _, err := s.GetPlan(fp); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetPlan(%q) = %v, want a bad fingerprint error", fp, err)
		}
		if err := s.PutEvidence(fp, ID("x"), env); err == nil {
			t.Errorf("PutEvidence(%q, …) accepts it", fp)
		}
		if _, _, err := s.Evidence(fp); err == nil {
			t.Errorf("Evidence(%q) accepts it", fp)
		}
	}
	if err := store.CheckFingerprint(Fingerprint("ok")); err != nil {
		t.Errorf("CheckFingerprint of a good fingerprint: %v", err)
	}
	for _, id := range BadIDs {
		if err := s.PutEvidence(Fingerprint("ok"), id, env); err == nil {
			t.Errorf("PutEvidence(…, %q) accepts it as an id", id)
		}
		if _, err := s.Consume(id, 1, NewRun()); err == nil || errors.Is(err, store.ErrConsumed) {
			t.Errorf("Consume(%q) = %v, want a bad id error", id, err)
		}
	}
	id := ID("bad-run")
	for _, run := range BadRunIDs {
		if _, err := s.Consume(id, 1, run); err == nil || errors.Is(err, store.ErrConsumed) {
			t.Errorf("Consume(…, %q) = %v, want a bad run id error", run, err)
		}
	}
	if used, err := s.Used([]string{id}); err != nil || used[id] != 0 {
		t.Fatalf("Used after refused consumptions = %v, %v; want nothing spent", used, err)
	}
	recs, problems, err := s.Evidence(Fingerprint("ok"))
	if err != nil || len(recs) != 0 || len(problems) != 0 {
		t.Fatalf("after refused writes: %d records, problems %v, err %v; want nothing", len(recs), problems, err)
	}
}

func testEvidence(t *testing.T, s store.Store) {
	fp, other := Fingerprint("e"), Fingerprint("other")
	if recs, problems, err := s.Evidence(fp); err != nil || len(recs) != 0 || len(problems) != 0 {
		t.Fatalf("Evidence of nothing = %v, %v, %v; want empty", recs, problems, err)
	}
	want := map[string]*dsse.Envelope{}
	for i := range 5 {
		env := Envelope(fmt.Sprintf(`{"n":%d}`, i))
		id := ID(fmt.Sprint(i))
		want[id] = env
		if err := s.PutEvidence(fp, id, env); err != nil {
			t.Fatalf("PutEvidence: %v", err)
		}
		if err := s.PutEvidence(fp, id, env); err != nil {
			t.Fatalf("PutEvidence of the same record again: %v, want nil (idempotent)", err)
		}
	}
	if err := s.PutEvidence(other, ID("o"), Envelope(`{"other":true}`)); err != nil {
		t.Fatal(err)
	}
	recs, problems, err := s.Evidence(fp)
	if err != nil || len(problems) != 0 {
		t.Fatalf("Evidence: %v, problems %v", err, problems)
	}
	if len(recs) != len(want) {
		t.Fatalf("Evidence returned %d records, want %d (each stored once)", len(recs), len(want))
	}
	for _, r := range recs {
		found := false
		for _, w := range want {
			found = found || same(r, w)
		}
		if !found {
			t.Fatalf("Evidence returned a record that was not stored for this fingerprint: %+v", r)
		}
	}
}

// An id names a record: a second, different envelope under the same id
// must never replace the first (that would let a writer swap evidence).
func testEvidenceNeverOverwritten(t *testing.T, s store.Store) {
	fp, id := Fingerprint("o"), ID("o")
	first, second := Envelope(`{"first":true}`), Envelope(`{"second":true}`)
	if err := s.PutEvidence(fp, id, first); err != nil {
		t.Fatal(err)
	}
	err := s.PutEvidence(fp, id, second)
	if err != nil && !errors.Is(err, store.ErrExists) {
		t.Fatalf("PutEvidence of other bytes under a stored id: %v, want nil or ErrExists", err)
	}
	recs, _, err := s.Evidence(fp)
	if err != nil || len(recs) != 1 || !same(recs[0], first) {
		t.Fatalf("after a second write under one id: %d records (%v); want only the first", len(recs), err)
	}
}

func testConsumeOnce(t *testing.T, s store.Store) {
	id := ID("once")
	if used, err := s.Used([]string{id}); err != nil || used[id] != 0 {
		t.Fatalf("Used before any consumption = %v, %v; want 0", used, err)
	}
	slot, err := s.Consume(id, 1, NewRun())
	if err != nil || slot != 0 {
		t.Fatalf("Consume = %d, %v; want slot 0", slot, err)
	}
	_, err = s.Consume(id, 1, NewRun())
	if !errors.Is(err, store.ErrConsumed) {
		t.Fatalf("second Consume: %v, want ErrConsumed", err)
	}
	// The refusal reads the same whatever the store.
	if want := fmt.Sprintf("record %.12s…: all 1 uses spent by other runs: %v", id, store.ErrConsumed); err.Error() != want {
		t.Fatalf("refusal %q, want %q", err, want)
	}
	other := ID("other")
	used, err := s.Used([]string{id, other, "not-an-id"})
	if err != nil || used[id] != 1 || used[other] != 0 {
		t.Fatalf("Used = %v, %v; want %s:1 and nothing else", used, err, id[:8])
	}
}

func testConsumeUses(t *testing.T, s store.Store) {
	id := ID("uses")
	var slots []int
	for i := range 3 {
		slot, err := s.Consume(id, 3, NewRun())
		if err != nil {
			t.Fatalf("Consume %d of 3: %v", i+1, err)
		}
		slots = append(slots, slot)
		if used, err := s.Used([]string{id}); err != nil || used[id] != i+1 {
			t.Fatalf("Used after %d = %v, %v", i+1, used, err)
		}
	}
	slices.Sort(slots)
	if !slices.Equal(slots, []int{0, 1, 2}) {
		t.Fatalf("slots %v, want 0, 1, 2", slots)
	}
	if _, err := s.Consume(id, 3, NewRun()); !errors.Is(err, store.ErrConsumed) {
		t.Fatalf("fourth Consume of 3 uses: %v, want ErrConsumed", err)
	}
	if used, _ := s.Used([]string{id}); used[id] != 3 {
		t.Fatalf("Used after exhaustion = %d, want 3", used[id])
	}
}

// Race runs n consumers of record id with uses uses, all released at
// once, each a run of its own, and returns the slots taken and how many
// got ErrConsumed. Any other error fails t.
func Race(t *testing.T, s store.Store, id string, uses, n int) (slots []int, consumed int) {
	return race(t, s, id, uses, n, false)
}

// race is [Race]; with retry each consumer calls Consume a second time
// with its run id, as a retry whose first answer was lost does, and the
// two answers must agree.
func race(t *testing.T, s store.Store, id string, uses, n int, retry bool) (slots []int, consumed int) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
		errs  []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := NewRun()
			<-start
			slot, err := s.Consume(id, uses, run)
			if retry {
				again, err2 := s.Consume(id, uses, run)
				if again != slot || (err == nil) != (err2 == nil) || (err != nil && !errors.Is(err2, store.ErrConsumed)) {
					err = fmt.Errorf("run %s: Consume = %d, %v, and again %d, %v; want the same answer", run, slot, err, again, err2)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				slots = append(slots, slot)
			case errors.Is(err, store.ErrConsumed):
				consumed++
			default:
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Consume failed otherwise than ErrConsumed: %v", err)
	}
	slices.Sort(slots)
	return slots, consumed
}

func testConcurrentConsumeOnce(t *testing.T, s store.Store) {
	id := ID("race-once")
	slots, consumed := Race(t, s, id, 1, Goroutines)
	if len(slots) != 1 || slots[0] != 0 || consumed != Goroutines-1 {
		t.Fatalf("%d goroutines consuming a single-use record: slots %v, %d ErrConsumed; want exactly one success", Goroutines, slots, consumed)
	}
	if used, err := s.Used([]string{id}); err != nil || used[id] != 1 {
		t.Fatalf("Used = %v, %v; want 1", used, err)
	}
}

func testConcurrentConsumeUses(t *testing.T, s store.Store) {
	id := ID("race-uses")
	slots, consumed := Race(t, s, id, 5, 16)
	if !slices.Equal(slots, []int{0, 1, 2, 3, 4}) || consumed != 11 {
		t.Fatalf("16 consumers of a 5-use record: slots %v, %d ErrConsumed; want slots 0 to 4 once each and 11 refusals", slots, consumed)
	}
	if used, err := s.Used([]string{id}); err != nil || used[id] != 5 {
		t.Fatalf("Used = %v, %v; want 5", used, err)
	}
}

// testConcurrentConsumeMany races for many records at once: each is spent
// exactly once, whatever else is being consumed.
func testConcurrentConsumeMany(t *testing.T, s store.Store) {
	const records = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins = map[string]int{}
		errs []error
	)
	start := make(chan struct{})
	for i := range records * 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ID(fmt.Sprintf("many-%d", i%records))
			<-start
			_, err := s.Consume(id, 1, NewRun())
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				wins[id]++
			} else if !errors.Is(err, store.ErrConsumed) {
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range records {
		if id := ID(fmt.Sprintf("many-%d", i)); wins[id] != 1 {
			t.Errorf("record %d spent %d times, want once", i, wins[id])
		}
	}
}

// testConsumeIdempotent: a run that consumes again (a retry whose answer
// was lost) gets back the slot it holds and spends nothing more, even once
// every use is spent; only another run is refused.
func testConsumeIdempotent(t *testing.T, s store.Store) {
	for _, uses := range []int{1, 5} {
		id := ID(fmt.Sprint("idempotent-", uses))
		var holders []string
		for i := range uses {
			run := NewRun()
			for try := range 3 {
				slot, err := s.Consume(id, uses, run)
				if err != nil || slot != i {
					t.Fatalf("%d uses, run %d, try %d: Consume = %d, %v; want slot %d", uses, i, try+1, slot, err, i)
				}
			}
			holders = append(holders, run)
			if used, err := s.Used([]string{id}); err != nil || used[id] != i+1 {
				t.Fatalf("%d uses: Used after %d runs, each consuming 3 times = %v, %v; want %d", uses, i+1, used, err, i+1)
			}
		}
		for i, run := range holders {
			if slot, err := s.Consume(id, uses, run); err != nil || slot != i {
				t.Fatalf("%d uses, all spent: run %d consuming again = %d, %v; want its slot %d, not a refusal", uses, i, slot, err, i)
			}
		}
		if _, err := s.Consume(id, uses, NewRun()); !errors.Is(err, store.ErrConsumed) {
			t.Fatalf("%d uses, all spent: another run: %v, want ErrConsumed", uses, err)
		}
		if used, err := s.Used([]string{id}); err != nil || used[id] != uses {
			t.Fatalf("%d uses: Used at the end = %v, %v; want %d", uses, used, err, uses)
		}
	}
}

// testConcurrentConsumeRetried: racing runs that each consume twice (the
// second a retry) still spend each use exactly once, and each run's two
// answers agree.
func testConcurrentConsumeRetried(t *testing.T, s store.Store) {
	for _, uses := range []int{1, 5} {
		id := ID(fmt.Sprint("race-retried-", uses))
		slots, consumed := race(t, s, id, uses, 16, true)
		want := make([]int, uses)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(slots, want) || consumed != 16-uses {
			t.Fatalf("16 retrying consumers of a %d-use record: slots %v, %d ErrConsumed; want %v once each", uses, slots, consumed, want)
		}
		if used, err := s.Used([]string{id}); err != nil || used[id] != uses {
			t.Fatalf("Used = %v, %v; want %d", used, err, uses)
		}
	}
}

// testConcurrentConsumeAllUses: as many racers as uses: every one
// succeeds, each with its own slot (no use lost to contention).
func testConcurrentConsumeAllUses(t *testing.T, s store.Store) {
	const uses = Goroutines
	id := ID("race-all-uses")
	slots, consumed := Race(t, s, id, uses, uses)
	if len(slots) != uses || consumed != 0 {
		t.Fatalf("%d consumers of a %d-use record: %d slots, %d ErrConsumed; want every one to succeed", uses, uses, len(slots), consumed)
	}
	for i, slot := range slots {
		if slot != i {
			t.Fatalf("slots %v, want 0 to %d once each", slots, uses-1)
		}
	}
}

// Rounds is how many times a write race is run: a backend that loses it
// only sometimes still fails the suite.
const Rounds = 20

// testConcurrentPutPlan: concurrent writers of the same plan (two agents
// planning one invocation) all succeed, and what is stored is that plan.
func testConcurrentPutPlan(t *testing.T, s store.Store) {
	for round := range Rounds {
		fp, env := Fingerprint(fmt.Sprint("concurrent", round)), Envelope(fmt.Sprintf(`{"plan":%d}`, round))
		errs := together(16, func() error { return s.PutPlan(fp, env) })
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: concurrent PutPlan of the same bytes: %v, want success for every writer", round, err)
		}
		if got, err := s.GetPlan(fp); err != nil || !same(got, env) {
			t.Fatalf("round %d: GetPlan = %v, %v", round, got, err)
		}
	}
}

// testConcurrentPutEvidence: concurrent writers of the same record (a
// bridge retrying, two replicas) all succeed and it is stored once.
func testConcurrentPutEvidence(t *testing.T, s store.Store) {
	fp := Fingerprint("concurrent evidence")
	for round := range Rounds {
		id, env := ID(fmt.Sprint("concurrent", round)), Envelope(fmt.Sprintf(`{"record":%d}`, round))
		errs := together(16, func() error { return s.PutEvidence(fp, id, env) })
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: concurrent PutEvidence of the same record: %v, want success for every writer", round, err)
		}
	}
	recs, problems, err := s.Evidence(fp)
	if err != nil || len(problems) > 0 || len(recs) != Rounds {
		t.Fatalf("Evidence: %d records, problems %v, %v; want %d records", len(recs), problems, err, Rounds)
	}
}

// together runs f n times concurrently, released at once, and returns the
// errors.
func together(n int, f func() error) []error {
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f()
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// A principal's break-glass records and reviews are found by the
// principal, and only its own; like evidence, never overwritten
// (docs/adr/0028-break-glass.md).
func testBreakGlassByPrincipal(t *testing.T, s store.Store) {
	if recs, problems, err := store.BreakGlass(s, "alice"); err != nil || len(recs) != 0 || len(problems) != 0 {
		t.Fatalf("BreakGlass of nobody's = %v, %v, %v; want empty", recs, problems, err)
	}
	a1, a2, b1 := Envelope(`{"bg":"a1"}`), Envelope(`{"bg":"a2"}`), Envelope(`{"bg":"b1"}`)
	for _, c := range []struct {
		who string
		id  string
		env *dsse.Envelope
	}{{"alice", ID("a1"), a1}, {"alice", ID("a2"), a2}, {"bob", ID("b1"), b1}, {"alice", ID("a1"), a1}} {
		if err := store.PutBreakGlass(s, c.who, c.id, c.env); err != nil {
			t.Fatalf("PutBreakGlass(%s): %v", c.who, err)
		}
	}
	if err := store.PutBreakGlass(s, "alice", ID("a1"), b1); !errors.Is(err, store.ErrExists) {
		t.Fatalf("PutBreakGlass of other bytes under the same id: %v, want ErrExists", err)
	}
	got, problems, err := store.BreakGlass(s, "alice")
	if err != nil || len(problems) != 0 || len(got) != 2 {
		t.Fatalf("BreakGlass(alice) = %d records, %v, %v; want her 2", len(got), problems, err)
	}
	for _, r := range got {
		if !same(r, a1) && !same(r, a2) {
			t.Fatalf("BreakGlass(alice) returned a record that is not hers: %+v", r)
		}
	}
	if got, _, _ := store.BreakGlass(s, "bob"); len(got) != 1 || !same(got[0], b1) {
		t.Fatalf("BreakGlass(bob) = %v, want his one record", got)
	}
	if got, _, _ := store.BreakGlass(s, "alic"); len(got) != 0 {
		t.Fatalf("BreakGlass of a prefix of a principal = %v, want nothing", got)
	}
}

// testSignCountAdvance: a credential's count only moves forward; equal or
// lower is refused as a possible clone; a retry by the run that holds the
// count succeeds; credentials are independent.
func testSignCountAdvance(t *testing.T, s store.Store) {
	cred, other := "cred-advance", "cred-other"
	if got, err := s.SignCounts([]string{cred}); err != nil || len(got) != 0 {
		t.Fatalf("SignCounts of nothing = %v, %v; want empty", got, err)
	}
	r1, r2, r3 := NewRun(), NewRun(), NewRun()
	if err := s.AdvanceSignCount(cred, 5, r1); err != nil {
		t.Fatalf("first advance to 5: %v", err)
	}
	if err := s.AdvanceSignCount(cred, 5, r1); err != nil {
		t.Fatalf("retry of the same run's advance to 5: %v, want success", err)
	}
	for _, c := range []uint32{5, 4, 0} {
		err := s.AdvanceSignCount(cred, c, r2)
		if !errors.Is(err, store.ErrSignCount) || !strings.Contains(err.Error(), "possible clone") {
			t.Fatalf("advance from 5 to %d by another run: %v; want ErrSignCount saying possible clone", c, err)
		}
	}
	if err := s.AdvanceSignCount(cred, 9, r3); err != nil {
		t.Fatalf("advance 5 to 9: %v", err)
	}
	if err := s.AdvanceSignCount(cred, 5, r1); !errors.Is(err, store.ErrSignCount) {
		t.Fatalf("run 1 retrying 5 after 9 is stored: %v; want ErrSignCount", err)
	}
	if err := s.AdvanceSignCount(other, 1, r2); err != nil {
		t.Fatalf("another credential's count: %v", err)
	}
	got, err := s.SignCounts([]string{cred, other, "cred-none"})
	if err != nil || len(got) != 2 || got[cred] != 9 || got[other] != 1 {
		t.Fatalf("SignCounts = %v, %v; want %s=9 %s=1", got, err, cred, other)
	}
}

// signCountRace starts one goroutine per count, releases them together
// and returns which counts were accepted; every refusal must be
// ErrSignCount.
func signCountRace(t *testing.T, s store.Store, cred string, counts []uint32) []uint32 {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []uint32
		errs []error
	)
	start := make(chan struct{})
	for _, c := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := NewRun()
			<-start
			err := s.AdvanceSignCount(cred, c, run)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, c)
			case !errors.Is(err, store.ErrSignCount):
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("advances failed other than by ErrSignCount: %v", errs)
	}
	return won
}

// testConcurrentSignCountSame: runs racing to spend one count of one
// credential are serialised: exactly one wins.
func testConcurrentSignCountSame(t *testing.T, s store.Store) {
	counts := make([]uint32, Goroutines)
	for i := range counts {
		counts[i] = 7
	}
	if won := signCountRace(t, s, "cred-same", counts); len(won) != 1 {
		t.Fatalf("%d runs advancing one credential to 7: %d won; want exactly one", Goroutines, len(won))
	}
}

// testConcurrentSignCountMany: runs racing with distinct counts end with
// the highest stored, and the highest is never refused.
func testConcurrentSignCountMany(t *testing.T, s store.Store) {
	var counts []uint32
	for i := range 16 {
		counts = append(counts, uint32(10+i))
	}
	won := signCountRace(t, s, "cred-many", counts)
	if !slices.Contains(won, 25) {
		t.Fatalf("the highest count 25 was refused; won %v", won)
	}
	if got, err := s.SignCounts([]string{"cred-many"}); err != nil || got["cred-many"] != 25 {
		t.Fatalf("SignCounts after the race = %v, %v; want 25", got, err)
	}
}

// testContent: content kept under its sum comes back byte for byte, at
// every size up to the bound (several parts, where a backend splits it);
// content not under its own sum, or over the bound, is refused and
// nothing is kept; an unknown sum is ErrNotFound.
func testContent(t *testing.T, s store.Store) {
	for _, n := range []int{0, 1, 1000, 256 << 10, 256<<10 + 1, 700 << 10, store.MaxContent} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + n)
		}
		sum := store.SumOf(data)
		if err := s.PutContent(sum, data); err != nil {
			t.Fatalf("PutContent of %d bytes: %v", n, err)
		}
		if err := s.PutContent(sum, data); err != nil {
			t.Fatalf("PutContent of the same %d bytes again: %v, want success", n, err)
		}
		got, err := s.Content(sum)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Content of %d bytes: %d bytes, %v; want them back", n, len(got), err)
		}
	}
	other := []byte("SELECT 1;\n")
	wrong := store.SumOf([]byte("DROP TABLE users;\n"))
	if err := s.PutContent(wrong, other); !errors.Is(err, store.ErrContentSum) {
		t.Fatalf("PutContent under another content's sum: %v, want ErrContentSum", err)
	}
	if _, err := s.Content(wrong); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Content after a refused PutContent: %v, want ErrNotFound", err)
	}
	big := make([]byte, store.MaxContent+1)
	if err := s.PutContent(store.SumOf(big), big); err == nil {
		t.Fatal("PutContent over MaxContent succeeded")
	}
	if _, err := s.Content(store.SumOf(big)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Content over MaxContent: %v, want ErrNotFound", err)
	}
	for _, bad := range BadFingerprints {
		if err := s.PutContent(bad, nil); err == nil {
			t.Errorf("PutContent(%q) succeeded", bad)
		}
		if _, err := s.Content(bad); err == nil {
			t.Errorf("Content(%q) succeeded", bad)
		}
	}
}

// testConcurrentPutContent: two plans of the same bytes keep them at once
// and both succeed.
func testConcurrentPutContent(t *testing.T, s store.Store) {
	data := bytes.Repeat([]byte("ALTER TABLE t ADD COLUMN c int;\n"), 20000)
	sum := store.SumOf(data)
	if err := errors.Join(together(8, func() error { return s.PutContent(sum, data) })...); err != nil {
		t.Fatalf("concurrent PutContent of the same bytes: %v, want success for every writer", err)
	}
	if got, err := s.Content(sum); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Content: %d bytes, %v", len(got), err)
	}
}
