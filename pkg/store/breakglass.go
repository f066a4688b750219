package store

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/prod-write/prod-write/pkg/dsse"
)

// BreakGlassKey is the key under which a principal's break-glass records
// and the reviews of them are kept (docs/adr/0028-break-glass.md):
// a fingerprint-shaped key no plan can have (its preimage is in a domain of
// its own), so every backend keeps them as it keeps evidence, with the same
// never-overwrite rule, and the query by principal is one read of that key.
func BreakGlassKey(principal string) string {
	sum := sha256.Sum256([]byte("prod-write break-glass index\x00" + principal))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// PutBreakGlass stores a break-glass record or review under the principal
// who broke glass, never overwriting.
func PutBreakGlass(s Store, principal, id string, env *dsse.Envelope) error {
	return s.PutEvidence(BreakGlassKey(principal), id, env)
}

// BreakGlass returns what is stored under principal: its break-glass
// records and the reviews of them. The store is not trusted: the gate
// verifies each.
func BreakGlass(s Store, principal string) ([]*dsse.Envelope, []Problem, error) {
	return s.Evidence(BreakGlassKey(principal))
}
