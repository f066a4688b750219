// Package keystest makes, for tests only, ed25519 signatures that ZIP-215
// accepts and crypto/ed25519 rejects: the case that tells the two rules
// apart (docs/adr/0013-signature-rule.md). No production code imports it.
package keystest

import (
	"context"
	"crypto/ed25519"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"

	"filippo.io/edwards25519"
	"github.com/hdevalence/ed25519consensus"

	"github.com/prod-write/prod-write/pkg/keys"
)

// torsion is a point of order 8: the small-order point of the ZIP-215 and
// "Taming the many EdDSAs" (speccheck) test vectors.
var torsion = func() *edwards25519.Point {
	b, _ := hex.DecodeString("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")
	p, err := new(edwards25519.Point).SetBytes(b)
	if err != nil {
		panic(err)
	}
	return p
}()

// Cofactored signs like the holder of a mixed-order key, as speccheck's
// case 5 does: its public key is A = [a]B + T with T of order 8, and it
// signs with R = [r]B and S = r + k·a. Then [8][S]B = [8]R + [8][k]A
// (ZIP-215's cofactored equation) always holds, while [S]B = R + [k]A
// (crypto/ed25519's) holds only when [k]T is the identity; Sign retries
// until it is not, so every signature it makes tells the rules apart.
//
// Its key is not of small order, so keys.ParsePublic and a trust policy
// take it. It implements dsse.Signer.
type Cofactored struct {
	a     edwards25519.Scalar
	pub   keys.Public
	nonce [32]byte
}

// NewCofactored derives a mixed-order key from seed (any bytes).
func NewCofactored(seed []byte) *Cofactored {
	h := sha512.Sum512(seed)
	c := &Cofactored{}
	if _, err := c.a.SetUniformBytes(h[:]); err != nil {
		panic(err)
	}
	copy(c.nonce[:], h[32:])
	A := new(edwards25519.Point).ScalarBaseMult(&c.a)
	A.Add(A, torsion)
	c.pub = A.Bytes()
	return c
}

// Public is the mixed-order public key.
func (c *Cofactored) Public() keys.Public { return c.pub }

// KeyID implements dsse.Signer.
func (c *Cofactored) KeyID() (string, error) { return c.pub.ID(), nil }

// Sign implements dsse.Signer: a signature of msg that ZIP-215 accepts and
// crypto/ed25519 rejects. It panics if it cannot make one, which would
// mean the curve arithmetic is not what this package assumes.
func (c *Cofactored) Sign(_ context.Context, msg []byte) ([]byte, error) {
	for i := uint64(0); i < 256; i++ {
		h := sha512.New()
		h.Write(c.nonce[:])
		h.Write(binary.BigEndian.AppendUint64(nil, i))
		h.Write(msg)
		r, err := new(edwards25519.Scalar).SetUniformBytes(h.Sum(nil))
		if err != nil {
			panic(err)
		}
		R := new(edwards25519.Point).ScalarBaseMult(r).Bytes()
		h = sha512.New()
		h.Write(R)
		h.Write(c.pub)
		h.Write(msg)
		k, err := new(edwards25519.Scalar).SetUniformBytes(h.Sum(nil))
		if err != nil {
			panic(err)
		}
		S := new(edwards25519.Scalar).MultiplyAdd(k, &c.a, r)
		sig := append(R, S.Bytes()...)
		if !ed25519.Verify(ed25519.PublicKey(c.pub), msg, sig) {
			if !ed25519consensus.Verify(ed25519.PublicKey(c.pub), msg, sig) {
				panic("keystest: a cofactored signature that ZIP-215 rejects")
			}
			return sig, nil
		}
	}
	panic("keystest: no signature that only the cofactored equation accepts")
}
