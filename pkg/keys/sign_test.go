package keys

import (
	"bytes"
	"context"
	"testing"
)

// TestRFC8032Vectors: keys derived and signatures made by [Private]
// against RFC 8032 §7.1's test vectors, and each verifies.
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
		if !Verify(k.Public(), unhex(t, v.msg), unhex(t, v.sig)) {
			t.Errorf("seed %.8s…: the vector's signature does not verify", v.seed)
		}
	}
	// Warm derives and verifies the first vector: it must be a valid
	// pair, or the verification table would be built by the first real
	// check instead.
	if !Verify(warmKey, nil, warmSig) || !bytes.Equal(FromSeed(warmSeed).Public(), warmKey) ||
		!bytes.Equal(warmKey, unhex(t, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")) {
		t.Error("Warm's seed, key and signature are not RFC 8032's first vector")
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
