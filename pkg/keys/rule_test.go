package keys_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/prod-write/prod-write/pkg/keys"
)

// speccheck is the test vectors of "Taming the many EdDSAs" (Chalkias,
// Garillot and Nikolaenko, SSR 2020), cases 0-9 of
// github.com/novifinancial/ed25519-speccheck's cases.json, with the
// verdicts its results table gives for ZIP-215 (Zebra) and for Go's
// crypto/ed25519. Cases 4 and 5 hold only under the cofactored equation (a
// mixed-order public key), which ZIP-215 uses and crypto/ed25519 does not.
var speccheck = []struct {
	msg, pub, sig  string
	zip215, stdlib bool
}{
	{"8c93255d71dcab10e8f379c26200f3c7bd5f09d9bc3068d3ef4edeb4853022b6", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a0000000000000000000000000000000000000000000000000000000000000000", true, true},
	{"9bd9f44f4dcc75bd531b56b2cd280b0bb38fc1cd6d1230e14861d861de092e79", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", "f7badec5b8abeaf699583992219b7b223f1df3fbbea919844e3f7c554a43dd43a5bb704786be79fc476f91d3f3f89b03984d8068dcf1bb7dfc6637b45450ac04", true, true},
	{"aebf3f2601a0c8c5d39cc7d8911642f740b78168218da8471772b35f9d35b9ab", "f7badec5b8abeaf699583992219b7b223f1df3fbbea919844e3f7c554a43dd43", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa8c4bd45aecaca5b24fb97bc10ac27ac8751a7dfe1baff8b953ec9f5833ca260e", true, true},
	{"9bd9f44f4dcc75bd531b56b2cd280b0bb38fc1cd6d1230e14861d861de092e79", "cdb267ce40c5cd45306fa5d2f29731459387dbf9eb933b7bd5aed9a765b88d4d", "9046a64750444938de19f227bb80485e92b83fdb4b6506c160484c016cc1852f87909e14428a7a1d62e9f22f3d3ad7802db02eb2e688b6c52fcd6648a98bd009", true, true},
	{"e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec4011eaccd55b53f56c", "cdb267ce40c5cd45306fa5d2f29731459387dbf9eb933b7bd5aed9a765b88d4d", "160a1cb0dc9c0258cd0a7d23e94d8fa878bcb1925f2c64246b2dee1796bed5125ec6bc982a269b723e0668e540911a9a6a58921d6925e434ab10aa7940551a09", true, false},
	{"e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec4011eaccd55b53f56c", "cdb267ce40c5cd45306fa5d2f29731459387dbf9eb933b7bd5aed9a765b88d4d", "21122a84e0b5fca4052f5b1235c80a537878b38f3142356b2c2384ebad4668b7e40bc836dac0f71076f9abe3a53f9c03c1ceeeddb658d0030494ace586687405", true, false},
	{"85e241a07d148b41e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec40", "442aad9f089ad9e14647b1ef9099a1ff4798d78589e66f28eca69c11f582a623", "e96f66be976d82e60150baecff9906684aebb1ef181f67a7189ac78ea23b6c0e547f7690a0e2ddcd04d87dbc3490dc19b3b3052f7ff0538cb68afb369ba3a514", false, false},
	{"85e241a07d148b41e47d62c63f830dc7a6851a0b1f33ae4bb2f507fb6cffec40", "442aad9f089ad9e14647b1ef9099a1ff4798d78589e66f28eca69c11f582a623", "8ce5b96c8f26d0ab6c47958c9e68b937104cd36e13c33566acd2fe8d38aa19427e71f98a473474f2f13f06f97c20d58cc3f54b8bd0d272f42b695dd7e89a8c22", false, false},
	{"fdaebc429f4a735932a160da1301080c13280eea8bc280d1b392c6b9e6ba3a5a", "f7badec5b8abeaf699583992219b7b223f1df3fbbea919844e3f7c554a43dd43", "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f454d370c8d9fc323a41450f8d513eafeb5b0697390c1e505a0d4ddc71f566607", false, false},
	{"84b698d39be126ff55fe45079e6c8bf64a0d7db6994560b4e96b7021eb39c1a1", "f7badec5b8abeaf699583992219b7b223f1df3fbbea919844e3f7c554a43dd43", "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f084d5b99c2a9463d9c8bd5026916996984eeec87ddf1d3be329006ace1b37b09", true, false},
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOneRuleSpeccheck: every way pkg/keys checks a signature (Verify, the
// DSSE Verifier, a batch of one, and a batch where the signature sits among
// valid ones) gives each speccheck vector ZIP-215's verdict, including the
// vectors crypto/ed25519 rejects (docs/adr/0013-signature-rule.md). A
// replay that batches a record and a check that does not can then never
// disagree about it.
func TestOneRuleSpeccheck(t *testing.T) {
	// Valid signatures to mix the vector with.
	type triple struct{ pub, msg, sig []byte }
	var valid []triple
	for i := range 5 {
		k := keys.FromSeed(bytes.Repeat([]byte{byte(i + 1)}, 32))
		msg := fmt.Appendf(nil, "record %d", i)
		sig, _ := k.Sign(context.Background(), msg)
		valid = append(valid, triple{k.Public(), msg, sig})
	}
	differ := 0
	for i, v := range speccheck {
		t.Run(fmt.Sprintf("case %d", i), func(t *testing.T) {
			pub, msg, sig := keys.Public(mustHex(t, v.pub)), mustHex(t, v.msg), mustHex(t, v.sig)
			if got := ed25519.Verify(ed25519.PublicKey(pub), msg, sig); got != v.stdlib {
				t.Errorf("crypto/ed25519.Verify = %t; the speccheck results give Go %t", got, v.stdlib)
			}
			if got := keys.Verify(pub, msg, sig); got != v.zip215 {
				t.Errorf("Verify = %t, want ZIP-215's %t", got, v.zip215)
			}
			if err := (keys.Verifier{Key: pub}).Verify(context.Background(), msg, sig); (err == nil) != v.zip215 {
				t.Errorf("Verifier.Verify = %v, want ZIP-215's %t", err, v.zip215)
			}
			one := keys.NewBatch(1)
			one.Add(pub, msg, sig)
			if got := one.Verify(); got != v.zip215 {
				t.Errorf("a batch of one: %t, want ZIP-215's %t", got, v.zip215)
			}
			many := keys.NewBatch(len(valid) + 1)
			for j, o := range valid {
				if j == 2 {
					many.Add(pub, msg, sig)
				}
				many.Add(o.pub, o.msg, o.sig)
			}
			if got := many.Verify(); got != v.zip215 {
				t.Errorf("a batch of %d holding it among valid signatures: %t, want ZIP-215's %t", len(valid)+1, got, v.zip215)
			}
		})
		if v.zip215 != v.stdlib {
			differ++
		}
		if v.stdlib && !v.zip215 {
			t.Errorf("case %d: crypto/ed25519 accepts what ZIP-215 refuses", i)
		}
	}
	if differ == 0 {
		t.Error("no vector tells ZIP-215 from crypto/ed25519")
	}

	// A batch of valid signatures only verifies; an empty one does not.
	b := keys.NewBatch(len(valid))
	for _, o := range valid {
		b.Add(o.pub, o.msg, o.sig)
	}
	if !b.Verify() {
		t.Error("a batch of valid signatures does not verify")
	}
	if keys.NewBatch(0).Verify() {
		t.Error("an empty batch verifies")
	}
}
