package keys

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"
)

// TestSignMatchesStdlib: ed25519 signatures are deterministic, so the
// table-free signer must give, for every seed and message, exactly the
// public key and signature crypto/ed25519 gives.
func TestSignMatchesStdlib(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.SliceOfN(rapid.Byte(), ed25519.SeedSize, ed25519.SeedSize).Draw(t, "seed")
		msg := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "msg")
		std := ed25519.NewKeyFromSeed(seed)
		k := FromSeed(seed)
		if !bytes.Equal(k.Public(), std.Public().(ed25519.PublicKey)) {
			t.Fatalf("public key %x, crypto/ed25519 %x", []byte(k.Public()), std.Public())
		}
		sig, _ := k.Sign(context.Background(), msg)
		if want := ed25519.Sign(std, msg); !bytes.Equal(sig, want) {
			t.Fatalf("signature %x, crypto/ed25519 %x", sig, want)
		}
	})
}

// TestRFC8032Vectors: the signer against RFC 8032 §7.1's test vectors.
func TestRFC8032Vectors(t *testing.T) {
	for _, v := range []struct{ seed, pub, msg, sig string }{
		{"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
			"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
			"e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"},
		{"4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
			"3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
			"92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"},
	} {
		k := FromSeed(unhex(t, v.seed))
		if got := k.Public(); !bytes.Equal(got, unhex(t, v.pub)) {
			t.Errorf("seed %.8s…: public %x, want %s", v.seed, []byte(got), v.pub)
		}
		if sig, _ := k.Sign(context.Background(), unhex(t, v.msg)); !bytes.Equal(sig, unhex(t, v.sig)) {
			t.Errorf("seed %.8s…: signature %x, want %s", v.seed, sig, v.sig)
		}
	}
	// Warm verifies the first vector: it must be a valid pair, or the
	// verification table would be built by the first real check instead.
	if !ed25519.Verify(warmKey, nil, warmSig) || !bytes.Equal(warmKey, unhex(t, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")) {
		t.Error("Warm's pair is not RFC 8032's first vector")
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b := make([]byte, len(s)/2)
	for i := range b {
		var c byte
		for _, h := range s[2*i : 2*i+2] {
			switch {
			case h >= '0' && h <= '9':
				c = c<<4 | byte(h-'0')
			case h >= 'a' && h <= 'f':
				c = c<<4 | byte(h-'a'+10)
			default:
				t.Fatalf("bad hex %q", s)
			}
		}
		b[i] = c
	}
	return b
}

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
		if !bytes.Equal(k.seed[:], seed) || !bytes.Equal(k.Public(), std.Public().(ed25519.PublicKey)) {
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
