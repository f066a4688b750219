package passkeyenroll_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/passkeyenroll"
	"github.com/prod-write/prod-write/pkg/passkeytest"
	"github.com/prod-write/prod-write/pkg/refusal"
)

const origin = "https://approve.example.test"

type world struct {
	dir   string
	alice *keys.Private
	trust string // trust.toml, without alice's passkeys
	now   time.Time
	e     *passkeyenroll.Enroller
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{dir: t.TempDir(), now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	var err error
	if w.alice, err = keys.Generate(); err != nil {
		t.Fatal(err)
	}
	bob, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	w.trust = fmt.Sprintf("[passkey]\norigin = %q\n\n[[principal]]\nid = \"bob\"\nroles = [\"approver\"]\nkey = %q\n\n[[principal]]\nid = \"alice\"\nroles = [\"approver\"]\nkey = %q\n",
		origin, bob.Public(), w.alice.Public())
	w.e = &passkeyenroll.Enroller{Dir: filepath.Join(w.dir, "enrol"), Policy: w.policy(t, ""), Now: func() time.Time { return w.now }}
	return w
}

func (w *world) policy(t *testing.T, extra string) *approval.Policy {
	t.Helper()
	p, err := approval.ParsePolicy("trust.toml", []byte(w.trust+extra))
	if err != nil {
		t.Fatalf("%v\n%s", err, w.trust+extra)
	}
	return p
}

func options(t *testing.T, b *passkeyenroll.Begun) []byte {
	t.Helper()
	o, err := json.Marshal(b.Options)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func register(t *testing.T, a *passkeytest.Authenticator, opts []byte, r passkeytest.Registration) []byte {
	t.Helper()
	if r.Origin == "" {
		r.Origin = origin
	}
	resp, err := a.Register(opts, r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func wantRefused(t *testing.T, err error, code refusal.Code, what string) {
	t.Helper()
	if !refusal.Is(err, code) {
		t.Fatalf("%s: %v; want refused %s", what, err, code)
	}
}

// A code enrols once: the second begin with it is refused, and of two
// begins racing on one code exactly one wins.
func TestCodeUsedTwiceRefused(t *testing.T) {
	w := newWorld(t)
	code, _, err := w.e.IssueCode("alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.e.BeginWithCode(code)
	if err != nil || b.Principal != "alice" || b.Authorised != passkeyenroll.ByCode {
		t.Fatalf("begin with a fresh code: %+v, %v", b, err)
	}
	_, err = w.e.BeginWithCode(code)
	wantRefused(t, err, refusal.EvidenceConsumed, "begin with the code again")
	// Lower case and spaces around are the same code, and spent too.
	_, err = w.e.BeginWithCode(" " + strings.ToLower(code) + "\n")
	wantRefused(t, err, refusal.EvidenceConsumed, "begin with the code in lower case")

	code, _, err = w.e.IssueCode("alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = w.e.BeginWithCode(code) }()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else if !refusal.Is(err, refusal.EvidenceConsumed) {
			t.Errorf("a racing begin: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of 8 begins racing on one code began; want exactly 1", won)
	}
}

// An expired code is refused, and it was never shown anywhere but by
// IssueCode: the store holds its hash only.
func TestCodeExpiredRefused(t *testing.T) {
	w := newWorld(t)
	code, exp, err := w.e.IssueCode("alice", time.Minute)
	if err != nil || !exp.Equal(w.now.Add(time.Minute)) {
		t.Fatalf("issue: %v %v", exp, err)
	}
	w.now = exp
	_, err = w.e.BeginWithCode(code)
	wantRefused(t, err, refusal.EvidenceExpired, "begin with an expired code")
	if strings.Contains(err.Error(), code) {
		t.Fatalf("the refusal quotes the code: %v", err)
	}
	_ = filepath.Walk(w.e.Dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(path)
			if strings.Contains(string(b), code) || strings.Contains(path, code) {
				t.Errorf("%s holds the code itself", path)
			}
		}
		return nil
	})
}

// What a caller cannot make the service do with a code: begin with one it
// was not issued (or made up, or a path), issue one for a principal the
// policy does not name, or one standing longer than a day.
func TestCodeStrangerInput(t *testing.T) {
	w := newWorld(t)
	for _, c := range []string{"", "../../../../etc/passwd", strings.Repeat("A", 32), strings.Repeat("A", 31) + "!", strings.Repeat("A", 4000)} {
		if _, err := w.e.BeginWithCode(c); !refusal.Is(err, refusal.SignatureInvalid) {
			t.Errorf("begin with code %.40q: %v; want refused %s", c, err, refusal.SignatureInvalid)
		}
	}
	if _, _, err := w.e.IssueCode("mallory", 0); !refusal.Is(err, refusal.PrincipalUnknown) {
		t.Errorf("a code for no principal: %v", err)
	}
	if _, _, err := w.e.IssueCode("alice", 25*time.Hour); !refusal.Is(err, refusal.ParamInvalid) {
		t.Errorf("a code for 25h: %v", err)
	}
}

// The registration is verified by go-webauthn against the enrolment it
// answers: made at another origin, for another RP ID, for a challenge
// the service did not issue, without user verification, after the
// enrolment expired, or a second time: each refused.
func TestFinishRefusals(t *testing.T) {
	cases := []struct {
		name string
		reg  passkeytest.Registration
		// before runs between begin and finish.
		before func(w *world)
		code   refusal.Code
		says   string
	}{
		{name: "wrong origin", reg: passkeytest.Registration{Origin: "https://evil.example.test"}, code: refusal.SignatureInvalid, says: "origin"},
		{name: "wrong RP ID", reg: passkeytest.Registration{RPID: "evil.example.test"}, code: refusal.SignatureInvalid, says: "RP"},
		{name: "challenge not issued", reg: passkeytest.Registration{Challenge: base64.RawURLEncoding.EncodeToString([]byte("a challenge nobody issued, 32 b"))}, code: refusal.SignatureInvalid, says: "did not issue"},
		{name: "user not verified", reg: passkeytest.Registration{Flags: passkeytest.FlagUP}, code: refusal.SignatureInvalid, says: "verif"},
		{name: "expired", before: func(w *world) { w.now = w.now.Add(passkeyenroll.SessionTTL) }, code: refusal.EvidenceExpired, says: "expired"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			b, err := w.e.BeginWithKey(w.alice)
			if err != nil {
				t.Fatal(err)
			}
			a, err := passkeytest.New()
			if err != nil {
				t.Fatal(err)
			}
			resp := register(t, a, options(t, b), c.reg)
			if c.before != nil {
				c.before(w)
			}
			_, err = w.e.Finish(resp)
			wantRefused(t, err, c.code, c.name)
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.says)) {
				t.Errorf("%s: the refusal %q does not say %q", c.name, err, c.says)
			}
			// The enrolment is spent whatever the verdict: a mended
			// response is refused too.
			if c.name != "challenge not issued" {
				_, err = w.e.Finish(register(t, a, options(t, b), passkeytest.Registration{}))
				wantRefused(t, err, refusal.EvidenceConsumed, c.name+", then a good response")
			}
		})
	}
}

// A good registration, authorised by alice's key, yields a snippet that,
// pasted into trust.toml under alice, lists the credential as hers with
// the key the authenticator signs with; finishing twice is refused; and
// once the policy lists it, enrolling it again is refused.
func TestEnrollByKey(t *testing.T) {
	w := newWorld(t)
	b, err := w.e.BeginWithKey(w.alice)
	if err != nil || b.Principal != "alice" || b.Authorised != passkeyenroll.ByKey {
		t.Fatalf("begin: %+v %v", b, err)
	}
	a, err := passkeytest.New()
	if err != nil {
		t.Fatal(err)
	}
	resp := register(t, a, options(t, b), passkeytest.Registration{})
	// The options' user handle is the one the gate checks assertions
	// against (docs/adr/0043-passkey-assertions-as-evidence.md); the
	// discoverable credential keeps it.
	if !bytes.Equal(a.UserHandle, approval.PasskeyUserHandle("alice")) {
		t.Fatalf("the credential was made for user handle %x, want alice's %x", a.UserHandle, approval.PasskeyUserHandle("alice"))
	}
	en, err := w.e.Finish(resp)
	if err != nil {
		t.Fatal(err)
	}
	if en.Principal != "alice" || en.CredentialID != a.CredentialID() || en.UserVerification != "required" {
		t.Fatalf("enrolled %+v", en)
	}
	_, err = w.e.Finish(resp)
	wantRefused(t, err, refusal.EvidenceConsumed, "finish twice")

	p := w.policy(t, en.Snippet())
	c, ok := p.Credential(a.CredentialID())
	if !ok || c.PublicKey != en.PublicKey {
		t.Fatalf("the snippet pasted: credential %v %+v", ok, c)
	}
	w.e.Policy = p
	b, err = w.e.BeginWithKey(w.alice)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.e.Finish(register(t, a, options(t, b), passkeytest.Registration{}))
	wantRefused(t, err, refusal.SignatureInvalid, "enrolling a credential the policy lists")
}

// An enrolment begun with alice's key is not finished once the policy no
// longer gives alice that key: the signed request is checked again.
func TestEnrollByKeyRevokedBetween(t *testing.T) {
	w := newWorld(t)
	b, err := w.e.BeginWithKey(w.alice)
	if err != nil {
		t.Fatal(err)
	}
	other, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	w.trust = strings.Replace(w.trust, w.alice.Public().String(), other.Public().String(), 1)
	w.e.Policy = w.policy(t, "")
	a, err := passkeytest.New()
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.e.Finish(register(t, a, options(t, b), passkeytest.Registration{}))
	wantRefused(t, err, refusal.SignatureInvalid, "finish after alice's key was replaced")
	stranger, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.e.BeginWithKey(stranger)
	wantRefused(t, err, refusal.PrincipalUnknown, "begin with a key of no principal")
}
