package keys

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestLoadPKCS8Forms: a key file in the v1 form keygen and OpenSSL write,
// and in the v2 form that also carries the public key, load to the same
// key; an RSA key is refused as not a key.
func TestLoadPKCS8Forms(t *testing.T) {
	seed := bytes.Repeat([]byte{7}, 32)
	std := ed25519.NewKeyFromSeed(seed)
	v1, err := x509.MarshalPKCS8PrivateKey(std)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(v1, pkcs8Prefix) || len(v1) != len(pkcs8Prefix)+32 {
		t.Fatalf("crypto/x509 writes %x; the fast path expects %x and a seed", v1, pkcs8Prefix)
	}
	// OneAsymmetricKey v2 (RFC 5958) with the public key as [1].
	v2 := append([]byte{0x30, 0x51, 0x02, 0x01, 0x01}, v1[5:]...)
	v2 = append(v2, append([]byte{0x81, 0x21, 0x00}, std.Public().(ed25519.PublicKey)...)...)
	if _, err := x509.ParsePKCS8PrivateKey(v2); err != nil {
		t.Skipf("crypto/x509 does not read PKCS#8 v2 here: %v", err)
	}
	dir := t.TempDir()
	for name, der := range map[string][]byte{"v1": v1, "v2": v2} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := Load(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(k.priv.Seed(), seed) || !bytes.Equal(k.Public(), std.Public().(ed25519.PublicKey)) {
			t.Errorf("%s: loaded another key", name)
		}
	}
}

// FuzzParsePKCS8Seed: parsePKCS8Seed, which does without crypto/x509,
// accepts exactly the ed25519 keys crypto/x509 reads, and the same seed.
func FuzzParsePKCS8Seed(f *testing.F) {
	v1, _ := x509.MarshalPKCS8PrivateKey(ed25519.NewKeyFromSeed(make([]byte, 32)))
	f.Add(v1)
	f.Add(v1[:len(v1)-1])
	f.Add(append(v1, 0))
	f.Add(append([]byte{0x30, 0x30, 0x02, 0x01, 0x01}, v1[5:]...)) // version 1
	f.Add([]byte{0x30, 0x30, 0x02, 0x01, 0x00, 0x30, 0x07, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x05, 0x00, 0x04, 0x22, 0x04, 0x20,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}) // NULL parameters
	f.Add([]byte{0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}) // X25519
	f.Fuzz(func(t *testing.T, der []byte) {
		seed, err := parsePKCS8Seed(der)
		parsed, xerr := x509.ParsePKCS8PrivateKey(der)
		std, isEd := parsed.(ed25519.PrivateKey)
		switch {
		case err != nil && !errors.Is(err, ErrNotAKey):
			t.Fatalf("error %v is not ErrNotAKey", err)
		case err == nil && (xerr != nil || !isEd):
			t.Fatalf("accepted %x, which crypto/x509 refuses (%v) or reads as %T", der, xerr, parsed)
		case err == nil && !bytes.Equal(seed, std.Seed()):
			t.Fatalf("seed %x, crypto/x509 reads %x", seed, std.Seed())
		case err != nil && xerr == nil && isEd:
			t.Fatalf("refused %x, an ed25519 key crypto/x509 reads: %v", der, err)
		}
	})
}
