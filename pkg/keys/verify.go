package keys

import (
	"crypto/ed25519"

	"github.com/hdevalence/ed25519consensus"
)

// One acceptance rule for every signature prod-write checks: ZIP-215
// (docs/adr/0013-signature-rule.md). A check of one signature and a batch
// check accept exactly the same signatures, so a record's verdict never
// depends on which path looked at it, or on what else was in its batch.
// Every verification in the module goes through [Verify] or [Batch].

// Verify reports whether sig is pub's signature of msg under ZIP-215: S
// canonical, A and R any encoding of a curve point, and the cofactored
// equation [8][S]B = [8]R + [8][k]A. It accepts every signature
// crypto/ed25519.Verify accepts, and also those whose only fault is a
// non-canonical point encoding or a small-order component that the
// cofactor removes, which only a key's holder can make.
func Verify(pub Public, msg, sig []byte) bool {
	return ed25519consensus.Verify(ed25519.PublicKey(pub), msg, sig)
}

// Batch checks many signatures at once, about twice as fast per signature
// as [Verify] one by one, by the same rule: a batch verifies if and only if
// Verify accepts each of its signatures (but for a chance of 2⁻¹²⁸ that a
// batch holding a bad signature verifies). When it fails, it does not say
// which signature is bad: check each with Verify.
type Batch struct {
	bv ed25519consensus.BatchVerifier
	n  int
}

// NewBatch returns an empty batch with room for n signatures.
func NewBatch(n int) *Batch {
	return &Batch{bv: ed25519consensus.NewPreallocatedBatchVerifier(n)}
}

// Add adds pub's signature sig of msg to the batch.
func (b *Batch) Add(pub Public, msg, sig []byte) {
	b.bv.Add(ed25519.PublicKey(pub), msg, sig)
	b.n++
}

// Verify reports whether every signature of the batch verifies; an empty
// batch does not.
func (b *Batch) Verify() bool { return b.n > 0 && b.bv.Verify() }
