package keys

import (
	"crypto/ed25519"
	"encoding/asn1"
	"fmt"
)

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
