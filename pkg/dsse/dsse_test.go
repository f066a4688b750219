package dsse_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	upstream "github.com/secure-systems-lab/go-securesystemslib/dsse"
	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
)

// The DSSE specification's own example (protocol.md, "Test vector").
func TestPAESpecVector(t *testing.T) {
	got := dsse.PAE("http://example.com/HelloWorld", []byte("hello world"))
	want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"
	if string(got) != want {
		t.Fatalf("PAE = %q, want %q", got, want)
	}
}

// Records signed before this package existed were signed over
// go-securesystemslib's PAE and stored in its JSON form: both must stay
// byte for byte the same.
func TestSameAsSecureSystemsLib(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		typ := rapid.String().Draw(t, "type")
		body := rapid.SliceOf(rapid.Byte()).Draw(t, "body")
		if got, want := dsse.PAE(typ, body), upstream.PAE(typ, body); !bytes.Equal(got, want) {
			t.Fatalf("PAE(%q, %q) = %q, want %q", typ, body, got, want)
		}
		n := rapid.IntRange(0, 3).Draw(t, "signatures")
		ours := dsse.Envelope{PayloadType: typ, Payload: rapid.String().Draw(t, "payload")}
		theirs := upstream.Envelope{PayloadType: ours.PayloadType, Payload: ours.Payload}
		if n > 0 {
			ours.Signatures, theirs.Signatures = []dsse.Signature{}, []upstream.Signature{}
		}
		for i := 0; i < n; i++ {
			id, sig := rapid.String().Draw(t, "keyid"), rapid.String().Draw(t, "sig")
			ours.Signatures = append(ours.Signatures, dsse.Signature{KeyID: id, Sig: sig})
			theirs.Signatures = append(theirs.Signatures, upstream.Signature{KeyID: id, Sig: sig})
		}
		a, err := json.Marshal(ours)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(theirs)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("JSON %s, want %s", a, b)
		}
		var back dsse.Envelope
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		again, _ := json.Marshal(back)
		if !bytes.Equal(again, b) {
			t.Fatalf("decoding %s and encoding again gave %s", b, again)
		}
	})
}

// An envelope signed here is the one go-securesystemslib's EnvelopeSigner
// makes with the same key.
func TestSignSameAsSecureSystemsLib(t *testing.T) {
	seed := make([]byte, 32)
	seed[0] = 7
	k := keys.FromSeed(seed)
	signer, err := upstream.NewEnvelopeSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		typ := rapid.String().Draw(t, "type")
		body := rapid.SliceOf(rapid.Byte()).Draw(t, "body")
		got, err := dsse.Sign(context.Background(), k, typ, body)
		if err != nil {
			t.Fatal(err)
		}
		want, err := signer.SignPayload(context.Background(), typ, body)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if !bytes.Equal(a, b) {
			t.Fatalf("signed %s, want %s", a, b)
		}
	})
}
