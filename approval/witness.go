package approval

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/pkg/tomlpos"
)

// Witness is a witness of the receipts log (ADR 0044, "Witnesses"): a
// [[witness]] table of the trust policy holding the witness's C2SP
// signed-note verifier key for cosignature/v1 (algorithm 0x04, Ed25519),
// as witnesses publish it: NAME+HASH+BASE64. Its cosignatures on a
// checkpoint note count towards the quorum replay --witnesses asks for.
// The URL a witness is reached at is operational configuration
// (prod-write.toml's [[witness]]), not trust.
type Witness struct {
	Key string `toml:"key" json:"key"`

	name     string
	verifier note.Verifier
}

// Name is the witness's key name, the name its cosignature lines carry.
func (w *Witness) Name() string { return w.name }

// Verifier is the witness's cosignature/v1 note verifier
// (github.com/transparency-dev/formats/note).
func (w *Witness) Verifier() note.Verifier { return w.verifier }

// algCosignatureV1 is the signed-note key type of an Ed25519
// cosignature/v1 verifier key (c2sp.org/tlog-cosignature).
const algCosignatureV1 = 0x04

// ParseWitnessKey parses a witness's cosignature/v1 verifier key
// strictly: NAME+HASH+BASE64, type 0x04 (Ed25519 cosignature/v1), 32
// bytes of key, and HASH the key's own hash (the library checks only its
// length). It returns the library's verifier and the raw public key.
func ParseWitnessKey(vkey string) (note.Verifier, []byte, error) {
	name, rest, ok1 := strings.Cut(vkey, "+")
	hash16, key64, ok2 := strings.Cut(rest, "+")
	if !ok1 || !ok2 || name == "" {
		return nil, nil, fmt.Errorf("key %q is not a signed-note verifier key NAME+HASH+BASE64", vkey)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(key64)
	if err != nil || len(raw) == 0 {
		return nil, nil, fmt.Errorf("key %q: its key is not base64", vkey)
	}
	if raw[0] != algCosignatureV1 {
		return nil, nil, fmt.Errorf("key %q is of type 0x%02x, not 0x04 (an Ed25519 cosignature/v1 key, as witnesses publish theirs)", vkey, raw[0])
	}
	if len(raw) != 33 {
		return nil, nil, fmt.Errorf("key %q: an Ed25519 key is 32 bytes, this one %d", vkey, len(raw)-1)
	}
	v, err := fnote.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		return nil, nil, fmt.Errorf("key %q: %w", vkey, err)
	}
	hash, err := strconv.ParseUint(hash16, 16, 32)
	if err != nil || len(hash16) != 8 || uint32(hash) != v.KeyHash() {
		return nil, nil, fmt.Errorf("key %q: its hash %s is not the key's (%08x)", vkey, hash16, v.KeyHash())
	}
	return v, raw[1:], nil
}

// parseWitnesses checks the [[witness]] tables: each key a witness key,
// no name and no public key twice (one witness counted once, whatever it
// is called).
func (p *Policy) parseWitnesses(name string, data []byte) error {
	names, pubs := map[string]int{}, map[string]int{}
	for i, w := range p.Witnesses {
		bad := func(format string, args ...any) error {
			return &ConfigError{File: name, Line: arrayTableKeyLine(data, "witness", i, "key"),
				Msg: fmt.Sprintf("witness %d: ", i+1) + fmt.Sprintf(format, args...)}
		}
		if w.Key == "" {
			return bad("key is required: the witness's cosignature/v1 verifier key NAME+HASH+BASE64")
		}
		v, pub, err := ParseWitnessKey(w.Key)
		if err != nil {
			return bad("%v", err)
		}
		if j, dup := names[v.Name()]; dup {
			return bad("name %q is already witness %d's: one name, one witness", v.Name(), j+1)
		}
		if j, dup := pubs[string(pub)]; dup {
			return bad("its public key is already witness %d's: one witness counts once, under whatever name", j+1)
		}
		names[v.Name()], pubs[string(pub)] = i, i
		w.name, w.verifier = v.Name(), v
	}
	return nil
}

// WitnessVerifiers are the note verifiers of the policy's witnesses.
func (p *Policy) WitnessVerifiers() []note.Verifier {
	vs := make([]note.Verifier, len(p.Witnesses))
	for i, w := range p.Witnesses {
		vs[i] = w.verifier
	}
	return vs
}

// arrayTableKeyLine returns the line of key in the i-th [[table]] of
// data, or of that table's header when key is not in it; 0 when neither
// can be found.
func arrayTableKeyLine(data []byte, table string, i int, key string) int {
	n, header := -1, 0
	for l, code := range tomlpos.CodeLines(data) {
		t := strings.Join(strings.Fields(code), "")
		switch {
		case t == "[["+table+"]]":
			n++
			if n == i {
				header = l + 1
			}
		case strings.HasPrefix(t, "["):
			if n == i {
				return header // witness i's table has ended
			}
		case n == i && strings.HasPrefix(t, key+"="):
			return l + 1
		}
	}
	return header
}
