package approval_test

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
)

// FuzzPasskeyAssertion: whatever bytes an assertion holds, the gate never
// panics, and a changed assertion never opens the gate.
func FuzzPasskeyAssertion(f *testing.F) {
	alice := newAuthenticator(f, "alice")
	policy := passkeyPolicy(f, alice, "", true)
	w := newPasskeyWorldTB(f, "")
	st := w.statement(approval.Approve)
	good := alice.assert(f, st, ceremony{})
	f.Add(good.AuthenticatorData, good.ClientDataJSON, good.Signature)
	f.Add([]byte{}, []byte("{}"), []byte{})
	f.Fuzz(func(t *testing.T, ad, cdj, sig []byte) {
		as := approval.PasskeyAssertion{CredentialID: alice.id, AuthenticatorData: ad, ClientDataJSON: cdj, Signature: sig}
		_, err := approval.Evaluate(approval.Input{Plan: w.planEnv, Evidence: append(w.evidence, passkeyDecision(t, st, as)), Policy: policy, Op: w.op, Now: testNow})
		same := string(ad) == string(good.AuthenticatorData) && string(cdj) == string(good.ClientDataJSON) && string(sig) == string(good.Signature)
		if err == nil && !same && !strings.Contains(string(cdj), "webauthn.get") {
			t.Fatalf("an assertion without webauthn.get opened the gate")
		}
	})
}

// FuzzPasskeyUserHandle: whatever user handle rides along with a good
// assertion (the signature does not cover it), the gate counts the
// decision exactly when the handle is absent or the approver's
// (docs/adr/0043-passkey-assertions-as-evidence.md).
func FuzzPasskeyUserHandle(f *testing.F) {
	alice := newAuthenticator(f, "alice")
	policy := passkeyPolicy(f, alice, "", true)
	w := newPasskeyWorldTB(f, "")
	st := w.statement(approval.Approve)
	good := alice.assert(f, st, ceremony{})
	f.Add([]byte(nil))
	f.Add(approval.PasskeyUserHandle("alice"))
	f.Add(approval.PasskeyUserHandle("bob"))
	f.Add([]byte("alice"))
	f.Fuzz(func(t *testing.T, handle []byte) {
		as := good
		as.UserHandle = handle
		_, err := approval.Evaluate(approval.Input{Plan: w.planEnv, Evidence: append(w.evidence, passkeyDecision(t, st, as)), Policy: policy, Op: w.op, Now: testNow})
		want := len(handle) == 0 || bytes.Equal(handle, approval.PasskeyUserHandle("alice"))
		if (err == nil) != want {
			t.Fatalf("user handle %x: gate error %v; want it to count: %v", handle, err, want)
		}
	})
}

// BenchmarkPasskeyVerify compares the gate verifying a passkey decision
// with it verifying an ed25519-signed approval of the same plan.
func BenchmarkPasskeyVerify(b *testing.B) {
	alice := newAuthenticator(b, "alice")
	w := newPasskeyWorldTB(b, "")
	st := w.statement(approval.Approve)
	pk := passkeyDecision(b, st, alice.assert(b, st, ceremony{}))
	ed := mustSign(b, "alice", approval.TypeTrinity, answer(w.plan.Fingerprint, w.record, approval.Approve, "alice"))
	for _, c := range []struct {
		name     string
		required bool
		env      *approval.Envelope
	}{{"passkey", true, pk}, {"ed25519", false, ed}} {
		policy := passkeyPolicy(b, alice, "", c.required)
		in := approval.Input{Plan: w.planEnv, Evidence: append(w.evidence[:1:1], c.env), Policy: policy, Op: w.op, Now: testNow}
		b.Run("gate/"+c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := approval.Evaluate(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	msg := []byte("a plain ed25519 verification of a short message")
	sig := ed25519.Sign(priv, msg)
	b.Run("ed25519_only", func(b *testing.B) {
		for b.Loop() {
			ed25519.Verify(pub, msg, sig)
		}
	})
}
