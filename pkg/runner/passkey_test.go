package runner_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"
	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

const pkOrigin = "https://approve.example.test"

// pkDeployment is a deployment whose say needs a certainty record from
// smith and one approval, which alice gives with her passkey through the
// bridge.
type pkDeployment struct {
	*deployment
	smith, bridge *keys.Private
	cred          *ecdsa.PrivateKey
	credID        []byte
	plans         int
}

func newPasskeyDeployment(t *testing.T) *pkDeployment {
	t.Helper()
	d := &pkDeployment{deployment: newDeployment(t)}
	var alice *keys.Private
	for _, k := range []**keys.Private{&d.smith, &d.bridge, &alice} {
		var err error
		if *k, err = keys.Generate(); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if d.cred, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	id := sha256.Sum256([]byte("alice's phone"))
	d.credID = id[:16]
	pub, err := d.cred.PublicKey.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	raw := pub.Bytes()
	cose, err := webauthncbor.Marshal(webauthncose.EC2PublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.EllipticKey), Algorithm: int64(webauthncose.AlgES256)},
		Curve:         int64(webauthncose.P256), XCoord: raw[1:33], YCoord: raw[33:],
	})
	if err != nil {
		t.Fatal(err)
	}
	// One operation per plan: a plan's fingerprint is what it does, so
	// each plan a test makes says its own word.
	var op strings.Builder
	for i := range 4 {
		fmt.Fprintf(&op, "[[operation]]\nname = \"say%d\"\ndescription = \"print the target\"\nmutating = true\nprogram = \"echo\"\n"+
			"args = [\"said\", \"{target}\"]\ntargets = [\"staging\"]\n[operation.approval]\npaths = [\"smith+trinity\"]\napprovers = 1\n\n", i)
	}
	if err := os.WriteFile(filepath.Join(d.dir, "operations", "say.toml"), []byte(op.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	trust, err := os.ReadFile(filepath.Join(d.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	trust = fmt.Appendf(trust, "\n[[principal]]\nid = \"smith\"\nroles = [\"operator\"]\nkey = %q\n"+
		"\n[[principal]]\nid = \"bridge\"\nroles = [\"bridge\"]\nkey = %q\n"+
		"\n[[principal]]\nid = \"alice\"\nroles = [\"approver\"]\nkey = %q\n"+
		"[[principal.passkey]]\nid = %q\npublic_key = %q\n"+
		"\n[passkey]\norigin = %q\nrequired_targets = [\"staging\"]\n",
		d.smith.Public(), d.bridge.Public(), alice.Public(),
		base64.RawURLEncoding.EncodeToString(d.credID), "cose:"+base64.RawURLEncoding.EncodeToString(cose), pkOrigin)
	if err := os.WriteFile(filepath.Join(d.dir, "trust.toml"), trust, 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *pkDeployment) credential() string { return base64.RawURLEncoding.EncodeToString(d.credID) }

// plan stores a new plan of say on staging, smith's certainty record for
// it (whose id it returns too) and alice's passkey approval of it made
// with sign count counter.
func (d *pkDeployment) plan(t *testing.T, counter uint32) (fp, record string) {
	t.Helper()
	r := d.runner(io.Discard, io.Discard)
	c, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := r.Registry(c)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := reg.Resolve(operations.Request{Operation: fmt.Sprintf("say%d", d.plans), Target: "staging", Cwd: d.dir, Getenv: r.PassEnv}, operations.HashDigester{})
	if err != nil {
		t.Fatal(err)
	}
	d.plans++
	now := time.Now().UTC()
	plan.Planner, plan.Created = "agent", now
	st, err := r.Store(c)
	if err != nil {
		t.Fatal(err)
	}
	put := func(env *approval.Envelope) string {
		t.Helper()
		id, err := approval.ID(env)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutEvidence(plan.Fingerprint, id, env); err != nil {
			t.Fatal(err)
		}
		return id
	}
	sign := func(k *keys.Private, typ string, v any) *approval.Envelope {
		t.Helper()
		env, err := approval.Sign(k, typ, v)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	env := sign(d.agent, approval.TypePlan, plan)
	if err := st.PutPlan(plan.Fingerprint, env); err != nil {
		t.Fatal(err)
	}
	record = put(sign(d.smith, approval.TypeSmith, approval.CertaintyRecord{Fingerprint: plan.Fingerprint, Summary: "s", Effect: "e",
		BlastRadius: "b", Rollback: "r", Certainty: "high", Filer: "smith", Issued: now.Add(-time.Minute), Expires: now.Add(time.Hour)}))
	st2 := approval.PasskeyStatement{Fingerprint: plan.Fingerprint, Decision: approval.Approve, Expires: now.Add(time.Hour),
		Nonce: []byte("nonce " + plan.Fingerprint[7:19]), Record: record, Version: 2, Issued: now.Add(-time.Minute)}
	put(sign(d.bridge, approval.TypePasskey, approval.PasskeyDecision{Fingerprint: st2.Fingerprint, Record: record, Decision: st2.Decision,
		Approver: "alice", Nonce: st2.Nonce, Issued: st2.Issued, Expires: st2.Expires, Assertion: d.assert(t, st2, counter)}))
	return plan.Fingerprint, record
}

// assert is alice's authenticator signing st with sign count counter, as
// the approval page asks it to.
func (d *pkDeployment) assert(t *testing.T, st approval.PasskeyStatement, counter uint32) approval.PasskeyAssertion {
	t.Helper()
	ch := approval.PasskeyChallenge(st)
	cdj, err := json.Marshal(map[string]any{"type": "webauthn.get", "challenge": base64.RawURLEncoding.EncodeToString(ch[:]), "origin": pkOrigin, "crossOrigin": false})
	if err != nil {
		t.Fatal(err)
	}
	rp := sha256.Sum256([]byte("approve.example.test"))
	ad := append(rp[:], 0x01|0x04) // user present, user verified
	ad = binary.BigEndian.AppendUint32(ad, counter)
	h := sha256.Sum256(cdj)
	digest := sha256.Sum256(append(append([]byte(nil), ad...), h[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, d.cred, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	// alice's discoverable credential returns her user handle, which
	// the gate checks (docs/adr/0043-passkey-assertions-as-evidence.md).
	return approval.PasskeyAssertion{CredentialID: d.credID, AuthenticatorData: ad, ClientDataJSON: cdj, Signature: sig, UserHandle: approval.PasskeyUserHandle("alice")}
}

func (d *pkDeployment) intents(t *testing.T) []*receipts.Receipt {
	t.Helper()
	var out []*receipts.Receipt
	for _, r := range d.journal(t) {
		if r.Kind == receipts.KindIntent {
			out = append(out, r)
		}
	}
	return out
}

// A run that spends a passkey approval advances the credential's stored
// sign count; a later approval whose count is not above it is refused as
// a possible clone, and nothing runs.
func TestPasskeyRunAdvancesSignCount(t *testing.T) {
	d := newPasskeyDeployment(t)
	fp5, _ := d.plan(t, 5)
	fp3, rec3 := d.plan(t, 3)
	fp6, _ := d.plan(t, 6)

	var stdout, stderr bytes.Buffer
	if _, err := d.runner(&stdout, &stderr).Run(fp5); err != nil {
		t.Fatalf("run approved with sign count 5: %v (stderr %q)", err, stderr.String())
	}
	st, err := store.OpenDir(filepath.Join(d.dir, "state", "store"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.SignCounts([]string{d.credential()}); err != nil || got[d.credential()] != 5 {
		t.Fatalf("stored sign count after the run: %v, %v; want 5", got, err)
	}

	stdout.Reset()
	_, err = d.runner(&stdout, &stderr).Run(fp3)
	if r, ok := refusal.As(err); !ok || r.Code != refusal.SignatureInvalid || !strings.Contains(r.Reason, "possible clone") {
		t.Fatalf("run approved with sign count 3 after 5: %v; want refused %s saying possible clone", err, refusal.SignatureInvalid)
	}
	if stdout.Len() != 0 || len(d.intents(t)) != 1 {
		t.Fatalf("the refused run printed %q and the journal holds %d intents: it ran", stdout.String(), len(d.intents(t)))
	}
	// The gate refused it, on the stored count it was fed, before the
	// approval was spent.
	if used, err := st.Used([]string{rec3}); err != nil || used[rec3] != 0 {
		t.Fatalf("the refused run spent its certainty record (%v, %v): the gate was not fed the stored count", used, err)
	}

	if _, err := d.runner(&stdout, &stderr).Run(fp6); err != nil {
		t.Fatalf("run approved with sign count 6 after 5: %v", err)
	}
	if got, _ := st.SignCounts([]string{d.credential()}); got[d.credential()] != 6 {
		t.Fatalf("stored sign count = %v, want 6", got)
	}
}

// gatedStore lets a test hold runs at their consumption, after the gate
// has judged them on the sign counts it read, and see their advances.
type gatedStore struct {
	store.Store
	consume  map[string]func() // record id → what to wait for before consuming
	advanced map[uint32]chan struct{}
}

func (g *gatedStore) Consume(id string, uses int, run string) (int, error) {
	if wait, ok := g.consume[id]; ok {
		wait()
	}
	return g.Store.Consume(id, uses, run)
}

func (g *gatedStore) AdvanceSignCount(cred string, count uint32, run string) error {
	err := g.Store.AdvanceSignCount(cred, count, run)
	if ch, ok := g.advanced[count]; ok {
		close(ch)
	}
	return err
}

// Two runs racing on one credential, with counts 5 and 6, both past the
// gate (each judged on the stored counts before either advanced): the
// conditional write serialises them. Run 6 advances first, so run 5 is
// refused before its intent, and only run 6 leaves an intent.
func TestPasskeyConcurrentRunsSerialised(t *testing.T) {
	d := newPasskeyDeployment(t)
	fp5, rec5 := d.plan(t, 5)
	fp6, rec6 := d.plan(t, 6)
	at5, at6 := make(chan struct{}), make(chan struct{})
	g := &gatedStore{advanced: map[uint32]chan struct{}{6: make(chan struct{})}}
	g.consume = map[string]func(){
		// Run 6 consumes once run 5 has passed the gate too.
		rec6: func() { close(at6); <-at5 },
		// Run 5 consumes once run 6 is past the gate and has advanced.
		rec5: func() { close(at5); <-at6; <-g.advanced[6] },
	}
	s, err := store.OpenDir(filepath.Join(d.dir, "state", "store"))
	if err != nil {
		t.Fatal(err)
	}
	g.Store = s
	type result struct {
		out bytes.Buffer
		err error
	}
	var wg sync.WaitGroup
	results := map[string]*result{fp5: {}, fp6: {}}
	for fp, res := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := d.runner(&res.out, io.Discard)
			r.Store = func(*config.Config) (store.Store, error) { return g, nil }
			_, res.err = r.Run(fp)
		}()
	}
	wg.Wait()
	if err := results[fp6].err; err != nil {
		t.Fatalf("run with count 6: %v", err)
	}
	err = results[fp5].err
	if r, ok := refusal.As(err); !ok || r.Code != refusal.SignatureInvalid || !strings.Contains(r.Reason, "possible clone") {
		t.Fatalf("run with count 5, racing 6 and losing: %v; want refused %s saying possible clone", err, refusal.SignatureInvalid)
	}
	if results[fp5].out.Len() != 0 {
		t.Errorf("the losing run printed %q: it ran", results[fp5].out.String())
	}
	in := d.intents(t)
	if len(in) != 1 || in[0].Intent.Fingerprint != fp6 {
		t.Fatalf("journal: %d intents, want only run 6's", len(in))
	}
}

// replay replays the deployment's journal by its trust policy and
// returns the problem codes of each intent, in order, and whether it
// verified.
func (d *pkDeployment) replay(t *testing.T) (codes [][]string, ok bool) {
	t.Helper()
	policy, err := approval.LoadPolicy(filepath.Join(d.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(d.dir, "state", "journal", "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, err := (&receipts.Replayer{Policy: policy}).Replay(f, func(r receipts.Result) {
		if r.Kind != receipts.KindIntent {
			return
		}
		var cs []string
		for _, p := range r.Problems {
			cs = append(cs, p.Code+": "+p.Detail)
		}
		codes = append(codes, cs)
	})
	if err != nil {
		t.Fatal(err)
	}
	return codes, sum.OK
}

// forgetfulStore keeps no sign counts: a store that lost them, or one
// that lies (the store is not trusted, docs/DESIGN.md §2).
type forgetfulStore struct{ store.Store }

func (forgetfulStore) AdvanceSignCount(string, uint32, string) error { return nil }
func (forgetfulStore) SignCounts([]string) (map[string]uint32, error) {
	return map[string]uint32{}, nil
}

// Replay checks, offline and along the journal's order, that each
// credential's sign count moves forward: a journal of runs approved with
// counts 5 then 6 verifies; one whose store kept no counts, so that a run
// with count 5 followed one with 6, fails with sign_count_back.
func TestReplayPasskeySignCounts(t *testing.T) {
	d := newPasskeyDeployment(t)
	fp5, _ := d.plan(t, 5)
	fp6, _ := d.plan(t, 6)
	for _, fp := range []string{fp5, fp6} {
		if _, err := d.runner(io.Discard, io.Discard).Run(fp); err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	if codes, ok := d.replay(t); !ok || len(codes) != 2 {
		t.Fatalf("replay of runs with counts 5 then 6: ok %v, problems %v; want both verified", ok, codes)
	}

	d = newPasskeyDeployment(t)
	fp5, _ = d.plan(t, 5)
	fp6, _ = d.plan(t, 6)
	for _, fp := range []string{fp6, fp5} {
		r := d.runner(io.Discard, io.Discard)
		r.Store = func(c *config.Config) (store.Store, error) {
			s, err := store.OpenDir(c.StoreDir())
			return forgetfulStore{s}, err
		}
		if _, err := r.Run(fp); err != nil {
			t.Fatalf("run with a store that keeps no counts: %v", err)
		}
	}
	codes, ok := d.replay(t)
	if ok || len(codes) != 2 || len(codes[0]) != 0 || len(codes[1]) != 1 ||
		!strings.HasPrefix(codes[1][0], receipts.SignCountBack+": ") || !strings.Contains(codes[1][0], "possible clone") {
		t.Fatalf("replay of runs with counts 6 then 5: ok %v, problems %v; want the second intent failed with %s (a possible clone)", ok, codes, receipts.SignCountBack)
	}
}

// countingStore records the sign-count advances each run makes and lets
// a test act after one.
type countingStore struct {
	store.Store
	mu       sync.Mutex
	advances map[string][]uint32 // run id → counts advanced
	after    map[uint32]func()   // count → what to do once it has advanced
	consume  map[string]func()   // record id → what to wait for before consuming
}

func (c *countingStore) Consume(id string, uses int, run string) (int, error) {
	if wait, ok := c.consume[id]; ok {
		wait()
	}
	return c.Store.Consume(id, uses, run)
}

func (c *countingStore) AdvanceSignCount(cred string, count uint32, run string) error {
	err := c.Store.AdvanceSignCount(cred, count, run)
	c.mu.Lock()
	c.advances[run] = append(c.advances[run], count)
	c.mu.Unlock()
	if f, ok := c.after[count]; ok && err == nil {
		f()
	}
	return err
}

// The lock per credential orders the journal as the advances: two runs
// of one credential (counts 5 and 6) where run 6 reaches the lock while
// run 5 holds it between its advance and its intent. Run 6 waits there
// (the hook sees it wait, no sleeps), so each run advances once, the
// stored count ends at 6, the journal holds 5's intent then 6's and
// replay verifies both. Without the lock run 6 advances and appends its
// intent first, and the journal's order (6, 5) is not the advances'.
func TestPasskeyLockOrdersJournal(t *testing.T) {
	d := newPasskeyDeployment(t)
	fp5, _ := d.plan(t, 5)
	fp6, rec6 := d.plan(t, 6)
	lockPath := filepath.Join(d.dir, "state", "signcount-locks", store.CredKey(d.credential())+".lock")
	waiting, done6, advanced5 := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	runner.SetLockContended(t, func(path string, _ bool) {
		if path == lockPath {
			once.Do(func() { close(waiting) })
		}
	})
	s, err := store.OpenDir(filepath.Join(d.dir, "state", "store"))
	if err != nil {
		t.Fatal(err)
	}
	c := &countingStore{Store: s, advances: map[string][]uint32{}}
	c.after = map[uint32]func(){5: func() {
		close(advanced5)
		// Run 5 holds the lock until run 6 waits for it (or, with
		// no lock, until run 6 has finished).
		select {
		case <-waiting:
		case <-done6:
		}
	}}
	c.consume = map[string]func(){rec6: func() { <-advanced5 }}
	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, fp := range []string{fp5, fp6} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := d.runner(io.Discard, io.Discard)
			r.Store = func(*config.Config) (store.Store, error) { return c, nil }
			_, err := r.Run(fp)
			if fp == fp6 {
				close(done6)
			}
			mu.Lock()
			errs[fp] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	for fp, err := range errs {
		if err != nil {
			t.Fatalf("run of %s: %v", fp, err)
		}
	}
	if len(c.advances) != 2 {
		t.Fatalf("advances by run: %v; want one run advancing 5 and one 6", c.advances)
	}
	for run, counts := range c.advances {
		if len(counts) != 1 {
			t.Errorf("run %s advanced %v: want exactly one advance", run, counts)
		}
	}
	if got, err := s.SignCounts([]string{d.credential()}); err != nil || got[d.credential()] != 6 {
		t.Fatalf("stored sign count: %v, %v; want 6 (no update lost)", got, err)
	}
	in := d.intents(t)
	if len(in) != 2 || in[0].Intent.Fingerprint != fp5 || in[1].Intent.Fingerprint != fp6 {
		var order []string
		for _, r := range in {
			order = append(order, r.Intent.Fingerprint)
		}
		t.Fatalf("journal intents %v; want run 5's (%s) then run 6's (%s), the order of the advances: the lock did not hold run 6 back", order, fp5, fp6)
	}
	if codes, ok := d.replay(t); !ok {
		t.Fatalf("replay: problems %v", codes)
	}
}

// The lock is flock(2) between processes too: while another holds the
// credential's lock file (here the test, by its own open file, as a
// second process would), a run of that credential waits before its
// advance and appends nothing; it goes on once the lock is released.
func TestPasskeyLockBetweenProcesses(t *testing.T) {
	d := newPasskeyDeployment(t)
	fp5, _ := d.plan(t, 5)
	dir := filepath.Join(d.dir, "state", "signcount-locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(dir, store.CredKey(d.credential())+".lock")
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	waiting, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	runner.SetLockContended(t, func(path string, process bool) {
		if path == lockPath && process {
			once.Do(func() { close(waiting) })
		}
	})
	var runErr error
	go func() {
		defer close(done)
		_, runErr = d.runner(io.Discard, io.Discard).Run(fp5)
	}()
	select {
	case <-waiting:
	case <-done:
		t.Fatalf("the run finished (%v) while another process held its credential's lock", runErr)
	}
	st, err := store.OpenDir(filepath.Join(d.dir, "state", "store"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.SignCounts([]string{d.credential()}); err != nil || got[d.credential()] != 0 || len(d.intents(t)) != 0 {
		t.Fatalf("while waiting for the lock: count %v (%v), %d intents; want nothing advanced or appended", got, err, len(d.intents(t)))
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	<-done
	if runErr != nil {
		t.Fatalf("run once the lock was released: %v", runErr)
	}
	if got, _ := st.SignCounts([]string{d.credential()}); got[d.credential()] != 5 || len(d.intents(t)) != 1 {
		t.Fatalf("after the run: count %v, %d intents; want 5 and one", got, len(d.intents(t)))
	}
}
