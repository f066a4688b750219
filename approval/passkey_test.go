package approval_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

const pageOrigin = "https://approve.example.test"

// authenticator is a software WebAuthn authenticator: a P-256 key, a
// credential id, a counter and the user handle of the principal the
// credential was made for (nil: its assertions carry none).
type authenticator struct {
	key     *ecdsa.PrivateKey
	id      []byte
	counter uint32
	user    []byte
}

// newAuthenticator makes a discoverable credential of principal name, as
// enrolment makes it: its assertions carry approval.PasskeyUserHandle(name).
func newAuthenticator(t tb, name string) *authenticator {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := sha256.Sum256([]byte("credential " + name))
	return &authenticator{key: k, id: id[:16], user: approval.PasskeyUserHandle(name)}
}

func (a *authenticator) credID() string { return base64.RawURLEncoding.EncodeToString(a.id) }

// cose is the credential public key as a COSE_Key, as registration gives it.
func (a *authenticator) cose(t tb) string {
	t.Helper()
	pub, err := a.key.PublicKey.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	raw := pub.Bytes()
	b, err := webauthncbor.Marshal(webauthncose.EC2PublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.EllipticKey), Algorithm: int64(webauthncose.AlgES256)},
		Curve:         int64(webauthncose.P256), XCoord: raw[1:33], YCoord: raw[33:],
	})
	if err != nil {
		t.Fatal(err)
	}
	return "cose:" + base64.RawURLEncoding.EncodeToString(b)
}

// ceremony is what one assertion is made with; the zero value of each
// field means what a real page and authenticator would use.
type ceremony struct {
	challenge []byte
	typ       string
	origin    string
	rpID      string
	flags     byte // 0: UP|UV
	counter   uint32
}

const (
	flagUP = 0x01
	flagUV = 0x04
)

// assert signs a statement as the approval page and the authenticator do.
func (a *authenticator) assert(t tb, st approval.PasskeyStatement, c ceremony) approval.PasskeyAssertion {
	t.Helper()
	if c.challenge == nil {
		ch := approval.PasskeyChallenge(st)
		c.challenge = ch[:]
	}
	if c.typ == "" {
		c.typ = "webauthn.get"
	}
	if c.origin == "" {
		c.origin = pageOrigin
	}
	if c.rpID == "" {
		c.rpID = "approve.example.test"
	}
	if c.flags == 0 {
		c.flags = flagUP | flagUV
	}
	if c.counter == 0 {
		a.counter++
		c.counter = a.counter
	}
	cdj, err := json.Marshal(map[string]any{"type": c.typ, "challenge": base64.RawURLEncoding.EncodeToString(c.challenge), "origin": c.origin, "crossOrigin": false})
	if err != nil {
		t.Fatal(err)
	}
	rp := sha256.Sum256([]byte(c.rpID))
	ad := append(rp[:], c.flags)
	ad = binary.BigEndian.AppendUint32(ad, c.counter)
	h := sha256.Sum256(cdj)
	digest := sha256.Sum256(append(append([]byte(nil), ad...), h[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, a.key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return approval.PasskeyAssertion{CredentialID: a.id, AuthenticatorData: ad, ClientDataJSON: cdj, Signature: sig, UserHandle: a.user}
}

// passkeyPolicy is demoCast's policy with alice's credential (uv
// "required" or "preferred") and, when required, passkeys required for the
// staging target the test plans use.
func passkeyPolicy(t tb, alice *authenticator, uv string, required bool) *approval.Policy {
	t.Helper()
	src := policyTOML(demoCast)
	// alice's [[principal.passkey]] must follow her [[principal]] table.
	i := strings.Index(src, "id = \"bob\"")
	i = strings.LastIndex(src[:i], "[[principal]]")
	cred := fmt.Sprintf("[[principal.passkey]]\nid = %q\npublic_key = %q\n", alice.credID(), alice.cose(t))
	if uv != "" {
		cred += fmt.Sprintf("user_verification = %q\n", uv)
	}
	src = src[:i] + cred + "\n" + src[i:] + fmt.Sprintf("\n[passkey]\norigin = %q\n", pageOrigin)
	if required {
		src += "required_targets = [\"staging\"]\n"
	}
	p, err := approval.ParsePolicy("trust.toml", []byte(src))
	if err != nil {
		t.Fatalf("ParsePolicy: %v\n%s", err, src)
	}
	return p
}

// passkeyWorld is one plan with a certainty record, to be answered by
// alice's passkey.
type passkeyWorld struct {
	op       *operations.Operation
	plan     *operations.Plan
	planEnv  *approval.Envelope
	record   string
	evidence []*approval.Envelope
}

func newPasskeyWorld(t *testing.T, salt string) *passkeyWorld { return newPasskeyWorldTB(t, salt) }

func newPasskeyWorldTB(t tb, salt string) *passkeyWorld {
	op := mustOp(t, 1, []string{smith}, true)
	plan, planEnv := planFor(t, op, "agent", salt)
	rec := mustSign(t, "smith", approval.TypeSmith, smithRecord(plan.Fingerprint, "smith"))
	return &passkeyWorld{op: op, plan: plan, planEnv: planEnv, record: mustID(t, rec), evidence: []*approval.Envelope{rec}}
}

func (w *passkeyWorld) statement(decision string) approval.PasskeyStatement {
	return approval.PasskeyStatement{Fingerprint: w.plan.Fingerprint, Decision: decision, Expires: testNow.Add(time.Hour),
		Nonce: []byte("service nonce " + w.plan.Fingerprint[7:15]), Record: w.record}
}

// decision wraps an assertion of st as the service stores it (signed by
// the bridge principal).
func passkeyDecision(t tb, st approval.PasskeyStatement, as approval.PasskeyAssertion) *approval.Envelope {
	return mustSign(t, "bridge", approval.TypePasskey, approval.PasskeyDecision{
		Fingerprint: st.Fingerprint, Record: st.Record, Decision: st.Decision, Approver: "alice",
		Nonce: st.Nonce, Issued: testNow.Add(-time.Minute), Expires: st.Expires, Assertion: as,
	})
}

func TestPasskeyEvidence(t *testing.T) {
	alice := newAuthenticator(t, "alice")
	other := newAuthenticator(t, "mallory")
	for _, c := range []struct {
		name string
		// make returns the evidence to add and the sign counts the
		// gate is given.
		make   func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32)
		policy func(t *testing.T) *approval.Policy
		// want is "" for allowed, else a fragment of the refusal.
		want string
	}{
		{name: "accepted", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{}))}, nil
		}},
		{name: "accepted_without_uv_where_preferred", policy: func(t *testing.T) *approval.Policy { return passkeyPolicy(t, alice, "preferred", true) },
			make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
				st := w.statement(approval.Approve)
				return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{flags: flagUP}))}, nil
			}},
		{name: "made_for_another_fingerprint", want: "challenge is not this decision's", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			signed := st
			signed.Fingerprint = "sha256:" + strings.Repeat("00", 32)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, signed, ceremony{}))}, nil
		}},
		{name: "replayed_for_a_second_plan", want: "challenge is not this decision's", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			first := newPasskeyWorld(t, "-first")
			as := alice.assert(t, first.statement(approval.Approve), ceremony{})
			return []*approval.Envelope{passkeyDecision(t, w.statement(approval.Approve), as)}, nil
		}},
		{name: "deny_signature_replayed_as_approve", want: "challenge is not this decision's", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			as := alice.assert(t, w.statement(approval.Deny), ceremony{})
			return []*approval.Envelope{passkeyDecision(t, w.statement(approval.Approve), as)}, nil
		}},
		{name: "credential_not_in_the_policy", want: "is not in the trust policy", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{passkeyDecision(t, st, other.assert(t, st, ceremony{}))}, nil
		}},
		{name: "credential_removed_from_the_policy", want: "is not in the trust policy",
			policy: func(t *testing.T) *approval.Policy { return passkeyPolicy(t, other, "", true) },
			make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
				st := w.statement(approval.Approve)
				return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{}))}, nil
			}},
		{name: "signed_by_another_key_with_the_credential_id", want: "signature does not verify", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			forged := &authenticator{key: other.key, id: alice.id}
			return []*approval.Envelope{passkeyDecision(t, st, forged.assert(t, st, ceremony{}))}, nil
		}},
		{name: "uv_false_where_required", want: "user verification is required", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{flags: flagUP}))}, nil
		}},
		{name: "user_not_present", want: "did not see the user present", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{flags: flagUV}))}, nil
		}},
		{name: "sign_count_going_back", want: "a possible clone", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{counter: 7}))}, map[string]uint32{alice.credID(): 9}
		}},
		{name: "sign_count_repeated", want: "a possible clone", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{counter: 9}))}, map[string]uint32{alice.credID(): 9}
		}},
		{name: "wrong_origin", want: "not the approval page", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{origin: "https://approve.example.test.evil"}))}, nil
		}},
		{name: "wrong_rp_id_hash", want: "RP ID hash", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{rpID: "example.test"}))}, nil
		}},
		{name: "a_registration_not_an_assertion", want: "is not webauthn.get", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{typ: "webauthn.create"}))}, nil
		}},
		{name: "ed25519_approve_on_a_passkey_required_target", want: "approve with your passkey", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			return []*approval.Envelope{mustSign(t, "alice", approval.TypeTrinity, answer(w.plan.Fingerprint, w.record, approval.Approve, "alice"))}, nil
		}},
		{name: "ed25519_approve_counts_where_not_required", policy: func(t *testing.T) *approval.Policy { return passkeyPolicy(t, alice, "", false) },
			make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
				return []*approval.Envelope{mustSign(t, "alice", approval.TypeTrinity, answer(w.plan.Fingerprint, w.record, approval.Approve, "alice"))}, nil
			}},
		{name: "ed25519_deny_still_vetoes_a_passkey_approve", want: "a veto wins", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Approve)
			return []*approval.Envelope{
				passkeyDecision(t, st, alice.assert(t, st, ceremony{})),
				mustSign(t, "bob", approval.TypeTrinity, answer(w.plan.Fingerprint, "", approval.Deny, "bob")),
			}, nil
		}},
		{name: "passkey_deny_vetoes", want: "a veto wins", make: func(t *testing.T, w *passkeyWorld) ([]*approval.Envelope, map[string]uint32) {
			st := w.statement(approval.Deny)
			return []*approval.Envelope{passkeyDecision(t, st, alice.assert(t, st, ceremony{}))}, nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newPasskeyWorld(t, "")
			policy := passkeyPolicy(t, alice, "", true)
			if c.policy != nil {
				policy = c.policy(t)
			}
			ev, counts := c.make(t, w)
			d, err := approval.Evaluate(approval.Input{Plan: w.planEnv, Evidence: append(w.evidence, ev...), Policy: policy, Op: w.op, Now: testNow, SignCounts: counts})
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("allowed (path %s); want a refusal saying %q", d.Path, c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("refused with %v; want it to say %q", err, c.want)
			}
		})
	}
}

// TestPasskeyStatementVersions: a version 2 assertion binds the record's
// issued time, so a record post-dated by the storing service is refused;
// a version 1 assertion (made before version 2) still verifies, and the
// gate says which version it verified.
func TestPasskeyStatementVersions(t *testing.T) {
	alice := newAuthenticator(t, "alice")
	policy := passkeyPolicy(t, alice, "", true)
	issued := testNow.Add(-time.Minute)
	record := func(t *testing.T, st approval.PasskeyStatement, as approval.PasskeyAssertion, issued time.Time) *approval.Envelope {
		return mustSign(t, "bridge", approval.TypePasskey, approval.PasskeyDecision{
			Fingerprint: st.Fingerprint, Record: st.Record, Decision: st.Decision, Approver: "alice",
			Nonce: st.Nonce, Issued: issued, Expires: st.Expires, Assertion: as,
		})
	}
	eval := func(w *passkeyWorld, env *approval.Envelope) (*approval.Decision, error) {
		return approval.Evaluate(approval.Input{Plan: w.planEnv, Evidence: append(w.evidence, env), Policy: policy, Op: w.op, Now: testNow})
	}
	statement := func(w *passkeyWorld) approval.PasskeyStatement {
		st := w.statement(approval.Approve)
		st.Version, st.Issued = 2, issued
		return st
	}
	seen := func(d *approval.Decision) *approval.PasskeySeen {
		for _, a := range d.Evidence {
			if a.Passkey != nil {
				return a.Passkey
			}
		}
		return nil
	}
	t.Run("v2", func(t *testing.T) {
		w := newPasskeyWorld(t, "")
		st := statement(w)
		d, err := eval(w, record(t, st, alice.assert(t, st, ceremony{}), issued))
		if err != nil {
			t.Fatalf("v2 assertion refused: %v", err)
		}
		if s := seen(d); s == nil || s.Statement != 2 {
			t.Fatalf("passkey seen %+v; want statement 2", s)
		}
	})
	t.Run("v2_post_dated", func(t *testing.T) {
		w := newPasskeyWorld(t, "")
		st := statement(w)
		_, err := eval(w, record(t, st, alice.assert(t, st, ceremony{}), issued.Add(30*time.Second)))
		if err == nil || !strings.Contains(err.Error(), "challenge is not this decision's") {
			t.Fatalf("v2 assertion in a record whose issued time was moved: %v; want the challenge refused", err)
		}
	})
	t.Run("v1", func(t *testing.T) {
		w := newPasskeyWorld(t, "")
		st := w.statement(approval.Approve) // version 0: v1
		d, err := eval(w, record(t, st, alice.assert(t, st, ceremony{}), issued))
		if err != nil {
			t.Fatalf("v1 assertion refused: %v", err)
		}
		if s := seen(d); s == nil || s.Statement != 1 {
			t.Fatalf("passkey seen %+v; want statement 1", s)
		}
	})
}

// TestPasskeySnippetBindsItsPrincipal: the snippet `passkey enroll` writes
// names the principal it was enrolled for; pasted under another principal,
// the policy does not load, naming the line (docs/adr/0043-passkey-assertions-as-evidence.md).
// Attacker input: where a snippet is pasted in trust.toml. Under its own
// principal it loads; a snippet without the name (written before it was
// kept) still loads.
func TestPasskeySnippetBindsItsPrincipal(t *testing.T) {
	alice := newAuthenticator(t, "alice-snippet")
	src := policyTOML(demoCast)
	under := func(who, principalLine string) string {
		i := strings.Index(src, fmt.Sprintf("id = %q", who))
		j := strings.Index(src[i:], "\n\n")
		if j < 0 {
			j = len(src) - i
		}
		cred := fmt.Sprintf("\n[[principal.passkey]]\nid = %q\n%spublic_key = %q\n", alice.credID(), principalLine, alice.cose(t))
		return src[:i+j] + cred + src[i+j:] + fmt.Sprintf("\n[passkey]\norigin = %q\n", pageOrigin)
	}
	for _, tc := range []struct {
		name, under, line, want string
	}{
		{"under its own principal", "alice", "principal = \"alice\"\n", ""},
		{"a snippet from before it named one", "bob", "", ""},
		{"under another principal", "bob", "principal = \"alice\"\n", `was enrolled for principal "alice"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := approval.ParsePolicy("trust.toml", []byte(under(tc.under, tc.line)))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want it to load: %v", err)
			case tc.want != "":
				var ce *approval.ConfigError
				if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) || ce.Line == 0 {
					t.Fatalf("want a config error at a line naming %q, got %v", tc.want, err)
				}
			}
		})
	}
}

// TestPasskeyUserHandle: the user handle an assertion carries must be
// that of the principal the decision counts for; another principal's is
// refused signature_invalid, saying the passkey was enrolled for another
// principal (a credential filed under the wrong principal in trust.toml).
// An assertion without one (a non-discoverable credential, a decision
// stored before it was kept) verifies as before
// (docs/adr/0043-passkey-assertions-as-evidence.md).
// Attacker input: the user handle, which the authenticator's signature
// does not cover.
func TestPasskeyUserHandle(t *testing.T) {
	alice := newAuthenticator(t, "alice")
	policy := passkeyPolicy(t, alice, "", true)
	for _, c := range []struct {
		name   string
		handle []byte
		want   string // "" for allowed
	}{
		{"alice's own", approval.PasskeyUserHandle("alice"), ""},
		{"another principal's: bob's credential filed under alice", approval.PasskeyUserHandle("bob"), "enrolled for another principal"},
		{"a handle of no principal", []byte("alice"), "enrolled for another principal"},
		{"absent", nil, ""},
		{"empty, as absent", []byte{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newPasskeyWorld(t, "")
			st := w.statement(approval.Approve)
			as := alice.assert(t, st, ceremony{})
			// Not signed: set after the assertion is made, as an
			// authenticator holding a credential for c.handle returns it.
			as.UserHandle = c.handle
			env := passkeyDecision(t, st, as)
			id := mustID(t, env)
			d, err := approval.Evaluate(approval.Input{Plan: w.planEnv, Evidence: append(w.evidence, env), Policy: policy, Op: w.op, Now: testNow})
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("allowed (path %s); want the passkey decision refused", d.Path)
			}
			var got *approval.Assessed
			if d != nil {
				for _, a := range d.Evidence {
					if a.ID == id {
						got = a
					}
				}
			}
			if got == nil || got.Valid || got.Problem == nil || *got.Problem != refusal.SignatureInvalid || !strings.Contains(got.Why, c.want) {
				t.Fatalf("the passkey decision is assessed %+v (gate: %v); want signature_invalid saying %q", got, err, c.want)
			}
		})
	}
}

// TestPasskeyUserHandlePinned: the user handle of a principal is pinned
// (computed with Python's hashlib): every credential enrolled carries the
// handle of its time, so the derivation cannot change.
func TestPasskeyUserHandlePinned(t *testing.T) {
	if got := fmt.Sprintf("%x", approval.PasskeyUserHandle("alice")); got != "5a7f13ab5cedbd342a6c6ac43c61a89c" {
		t.Fatalf("PasskeyUserHandle(alice) = %s", got)
	}
}
