package keys_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"testing"

	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
)

// The PEM public key is PKIX, as crypto/x509 writes and reads it (cosign,
// openssl): it parses to the key's own public half, byte for byte what
// x509.MarshalPKIXPublicKey writes, and a DSSE signature the key made
// verifies with it over the envelope's PAE, as cosign verify-blob checks
// a signature over a blob.
func TestPublicPEM(t *testing.T) {
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	p := k.Public().PEM()
	block, rest := pem.Decode(p)
	if block == nil || block.Type != "PUBLIC KEY" || len(rest) != 0 {
		t.Fatalf("not one PEM PUBLIC KEY block:\n%s", p)
	}
	if !bytes.HasPrefix(p, []byte("-----BEGIN PUBLIC KEY-----\n")) {
		t.Errorf("starts %q", p[:30])
	}
	parsed, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pub, ok := parsed.(ed25519.PublicKey)
	if !ok || !bytes.Equal(pub, k.Public()) {
		t.Fatalf("parses to %T %x, want the key's %x", parsed, parsed, []byte(k.Public()))
	}
	std, err := x509.MarshalPKIXPublicKey(ed25519.PublicKey(k.Public()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(std, block.Bytes) {
		t.Errorf("DER %x, crypto/x509 writes %x", block.Bytes, std)
	}

	env, err := dsse.Sign(context.Background(), k, "application/vnd.in-toto+json", []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := base64.StdEncoding.DecodeString(env.Payload)
	sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if !ed25519.Verify(pub, dsse.PAE(env.PayloadType, body), sig) {
		t.Error("the envelope's signature does not verify with the PEM key")
	}
	// And only its own: another key's PEM refuses it.
	other, _ := keys.Generate()
	ob, _ := pem.Decode(other.Public().PEM())
	op, _ := x509.ParsePKIXPublicKey(ob.Bytes)
	if ed25519.Verify(op.(ed25519.PublicKey), dsse.PAE(env.PayloadType, body), sig) {
		t.Error("another key's PEM verifies the signature")
	}
}

// MarshalPEM is the file WriteNew writes and Load reads back.
func TestMarshalPEMLoads(t *testing.T) {
	k, _ := keys.Generate()
	path := t.TempDir() + "/k.key"
	if err := k.WriteNew(path); err != nil {
		t.Fatal(err)
	}
	got, err := keys.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Public(), k.Public()) {
		t.Error("loaded another key")
	}
}
