package keys_test

import (
	"bytes"
	"testing"

	"github.com/prod-write/prod-write/pkg/keys"
)

// ParsePublicPEM reads back what Public.PEM writes, and nothing else: not
// a private key, not a block with something after it, not another curve.
func TestParsePublicPEM(t *testing.T) {
	k := keys.FromSeed(bytes.Repeat([]byte{7}, 32))
	p, err := keys.ParsePublicPEM(k.Public().PEM())
	if err != nil || p.String() != k.Public().String() {
		t.Fatalf("ParsePublicPEM(PEM()) = %v, %v", p, err)
	}
	other := bytes.Replace(k.Public().PEM(), []byte("MCowBQYDK2VwAyEA"), []byte("MCowBQYDK2VxAyEA"), 1)
	for name, b := range map[string][]byte{
		"a private key":   k.MarshalPEM(),
		"trailing text":   append(k.Public().PEM(), "x\n"...),
		"another OID":     other,
		"the line itself": []byte(k.Public().String()),
	} {
		if _, err := keys.ParsePublicPEM(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
