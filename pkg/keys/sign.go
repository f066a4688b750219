package keys

import (
	"crypto/ed25519"
	"crypto/sha512"
	"crypto/x509"
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
// common form is read directly; any other goes through crypto/x509, which
// derives the public key with the table this file avoids.
func parsePKCS8Seed(der []byte) ([]byte, error) {
	if len(der) == len(pkcs8Prefix)+ed25519.SeedSize && string(der[:len(pkcs8Prefix)]) == string(pkcs8Prefix) {
		return der[len(pkcs8Prefix):], nil
	}
	parsed, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotAKey, err)
	}
	k, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: not ed25519", ErrNotAKey)
	}
	return k.Seed(), nil
}
