package keys

import (
	"crypto/ed25519"
	"crypto/sha512"
	"encoding/asn1"
	"fmt"

	"filippo.io/edwards25519"
)

// Signing without crypto/ed25519's precomputed table.
//
// crypto/ed25519 multiplies by the base point with a 30 KiB table that Go
// builds on first use, about a millisecond of CPU. prod-write signs two or
// three times per process (a plan, an answer, a run's intent and outcome),
// so it pays for that table on every invocation and gets almost nothing
// back. Here the base point is multiplied with edwards25519's constant-time
// ScalarMult instead, about 70µs each. The algorithm is RFC 8032 §5.1.6,
// step for step as crypto/ed25519 implements it, and ed25519 signatures are
// deterministic, so TestSignMatchesStdlib can hold every signature and public
// key byte for byte equal to crypto/ed25519's (docs/adr/0008-run-latency.md).

// expand derives the secret scalar, the nonce key and the public key from
// the seed (RFC 8032 §5.1.5).
func (k *Private) expand() {
	h := sha512.Sum512(k.seed[:])
	if _, err := k.s.SetBytesWithClamping(h[:32]); err != nil {
		panic("keys: " + err.Error()) // 32 bytes always clamp
	}
	copy(k.prefix[:], h[32:])
	k.pub = new(edwards25519.Point).ScalarMult(&k.s, edwards25519.NewGeneratorPoint()).Bytes()
}

// sign is RFC 8032 §5.1.6 for pure ed25519.
func (k *Private) sign(msg []byte) []byte {
	mh := sha512.New()
	mh.Write(k.prefix[:])
	mh.Write(msg)
	var digest [sha512.Size]byte
	r, err := new(edwards25519.Scalar).SetUniformBytes(mh.Sum(digest[:0]))
	if err != nil {
		panic("keys: " + err.Error()) // 64 bytes are always uniform
	}
	R := new(edwards25519.Point).ScalarMult(r, edwards25519.NewGeneratorPoint()).Bytes()

	kh := sha512.New()
	kh.Write(R)
	kh.Write(k.pub)
	kh.Write(msg)
	c, err := new(edwards25519.Scalar).SetUniformBytes(kh.Sum(digest[:0]))
	if err != nil {
		panic("keys: " + err.Error())
	}
	S := new(edwards25519.Scalar).MultiplyAdd(c, &k.s, r)

	sig := make([]byte, 0, ed25519.SignatureSize)
	return append(append(sig, R...), S.Bytes()...)
}

// pkcs8Prefix is the DER of a PKCS#8 v1 ed25519 private key (RFC 8410 §7)
// up to the 32-byte seed: the form keygen writes, and OpenSSL's genpkey.
var pkcs8Prefix = []byte{0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20}

// parsePKCS8Seed returns the seed of a PKCS#8 ed25519 private key. The
// common form is read directly; any other is decoded the way crypto/x509's
// ParsePKCS8PrivateKey decodes it (a fuzz test holds the two equal), without
// linking crypto/x509, whose dependencies every process would pay for at
// start-up (docs/PERFORMANCE.md).
func parsePKCS8Seed(der []byte) ([]byte, error) {
	if len(der) == len(pkcs8Prefix)+ed25519.SeedSize && string(der[:len(pkcs8Prefix)]) == string(pkcs8Prefix) {
		return der[len(pkcs8Prefix):], nil
	}
	var k struct {
		Version int
		Algo    struct {
			Algorithm  asn1.ObjectIdentifier
			Parameters asn1.RawValue `asn1:"optional"`
		}
		PrivateKey []byte
		// Attributes and the public key (PKCS#8 v2) are not read.
	}
	if _, err := asn1.Unmarshal(der, &k); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotAKey, err)
	}
	if !k.Algo.Algorithm.Equal(oidEd25519) {
		return nil, fmt.Errorf("%w: algorithm %v, not ed25519", ErrNotAKey, k.Algo.Algorithm)
	}
	if len(k.Algo.Parameters.FullBytes) != 0 {
		return nil, fmt.Errorf("%w: ed25519 takes no parameters", ErrNotAKey)
	}
	var seed []byte
	if _, err := asn1.Unmarshal(k.PrivateKey, &seed); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotAKey, err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: seed of %d bytes", ErrNotAKey, len(seed))
	}
	return seed, nil
}

// oidEd25519 is id-Ed25519 (RFC 8410 §3).
var oidEd25519 = asn1.ObjectIdentifier{1, 3, 101, 112}
