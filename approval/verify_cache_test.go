package approval_test

import (
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// The verification cache (Policy.CacheVerifications) is on wherever many
// records are opened: replay, the runner service, and the CLI when it reads
// evidence. A record that hits the cache is not verified again, so the cache
// is a signature check of its own: it may remember only a signature that
// verified, and a hit must mean this message, this key and this signature.

// TestVerifyBatchRemembersOnlyValidSignatures: when a batch fails, each
// signature is checked alone; the forged one must not be remembered, or
// Open would then accept it without checking.
func TestVerifyBatchRemembersOnlyValidSignatures(t *testing.T) {
	policy := mustPolicy(t, demoCast)
	policy.CacheVerifications()
	fp := "sha256:" + zeros64
	good := mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1))
	forged := flipSignature(t, mustSign(t, "alice", approval.TypeTrinity, answer(fp, zeros64, approval.Approve, "alice")), 77)
	forgedGo := flipPayload(t, mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1)), 30)

	policy.VerifyBatch([]*approval.Envelope{good, forged, forgedGo})

	if _, err := policy.Open(good); err != nil {
		t.Errorf("the valid record of a failed batch does not open: %v", err)
	}
	for name, env := range map[string]*approval.Envelope{"flipped signature": forged, "flipped payload": forgedGo} {
		if s, err := policy.Open(env); !refusal.Is(err, refusal.SignatureInvalid) {
			t.Errorf("%s: after a failed batch, Open = %v, %v; want signature_invalid", name, s, err)
		}
	}

	// A batch that verifies as a whole is remembered, and a forgery
	// opened after it is still checked.
	policy2 := mustPolicy(t, demoCast)
	policy2.CacheVerifications()
	policy2.VerifyBatch([]*approval.Envelope{good})
	if _, err := policy2.Open(good); err != nil {
		t.Errorf("the record of a good batch does not open: %v", err)
	}
	if _, err := policy2.Open(forged); !refusal.Is(err, refusal.SignatureInvalid) {
		t.Errorf("a forgery after a good batch: %v, want signature_invalid", err)
	}
}

// TestVerificationCacheIsBoundToKeyMessageAndSignature: a record verified
// once under alice's key does not open as bob's when its key id is swapped,
// nor with another signature or payload.
func TestVerificationCacheIsBoundToKeyMessageAndSignature(t *testing.T) {
	for _, batch := range []bool{false, true} {
		name := "Open"
		if batch {
			name = "VerifyBatch"
		}
		t.Run(name, func(t *testing.T) {
			policy := mustPolicy(t, demoCast)
			policy.CacheVerifications()
			fp := "sha256:" + zeros64
			env := mustSign(t, "alice", approval.TypeTrinity, answer(fp, zeros64, approval.Approve, "alice"))
			if batch {
				policy.VerifyBatch([]*approval.Envelope{env})
			}
			if s, err := policy.Open(env); err != nil || s.Signer.ID != "alice" {
				t.Fatalf("Open = %v, %v; want alice's record", s, err)
			}

			asBob := *env
			asBob.Signatures = append(asBob.Signatures[:0:0], env.Signatures...)
			asBob.Signatures[0].KeyID = keyFor("bob").Public().ID()
			if s, err := policy.Open(&asBob); err == nil {
				t.Errorf("alice's signature, relabelled with bob's key id, opens as %s's record", s.Signer.ID)
			} else if !refusal.Is(err, refusal.SignatureInvalid) {
				t.Errorf("relabelled key id: %v, want signature_invalid", err)
			}
			if _, err := policy.Open(flipSignature(t, env, 200)); !refusal.Is(err, refusal.SignatureInvalid) {
				t.Errorf("another signature over a cached record: %v, want signature_invalid", err)
			}
			if _, err := policy.Open(flipPayload(t, env, 12)); !refusal.Is(err, refusal.SignatureInvalid) {
				t.Errorf("another payload under a cached signature: %v, want signature_invalid", err)
			}
		})
	}
}
