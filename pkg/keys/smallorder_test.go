package keys_test

import (
	"encoding/base64"
	"encoding/hex"
	"testing"

	"filippo.io/edwards25519"

	"github.com/prod-write/prod-write/pkg/keys"
)

// TestParsePublicRefusesSmallOrder: every public key of small order (the
// eight points of the curve's torsion subgroup, not only the neutral
// element) verifies forged signatures under Go's ed25519.Verify, so a trust
// policy listing one would let anybody sign as that principal. ParsePublic
// must refuse all eight.
func TestParsePublicRefusesSmallOrder(t *testing.T) {
	// A point of order 8 (the first of the small-order encodings that
	// libsodium and "Taming the many EdDSAs" list); its multiples are the
	// whole torsion subgroup.
	raw, _ := hex.DecodeString("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")
	gen, err := new(edwards25519.Point).SetBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	identity := edwards25519.NewIdentityPoint()
	if new(edwards25519.Point).MultByCofactor(gen).Equal(identity) != 1 {
		t.Fatal("test point is not of small order")
	}
	four := new(edwards25519.Point).Add(gen, gen)
	four.Add(four, four)
	if four.Equal(identity) == 1 {
		t.Fatal("test point is of order 4 or less, not 8")
	}

	seen := map[string]bool{}
	p := edwards25519.NewIdentityPoint()
	for k := range 8 {
		enc := p.Bytes()
		if seen[string(enc)] {
			t.Fatalf("%d·T repeats an earlier point", k)
		}
		seen[string(enc)] = true
		s := keys.PublicPrefix + base64.StdEncoding.EncodeToString(enc)
		if _, err := keys.ParsePublic(s); err == nil {
			t.Errorf("ParsePublic accepts %d·T = %x, a key of small order", k, enc)
		}
		p.Add(p, gen)
	}

	// A key of full order still parses.
	good := keys.FromSeed(make([]byte, 32)).Public()
	if _, err := keys.ParsePublic(good.String()); err != nil {
		t.Errorf("ParsePublic(%s): %v", good, err)
	}
}
