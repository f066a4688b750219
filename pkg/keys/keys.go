// Package keys holds prod-write's ed25519 keys: generating them, storing the
// private half in a file only its owner can read, loading it back (refusing
// one that others can read or write, as ssh does), and the one-line public
// form that trust.toml takes ("ed25519:" followed by standard base64).
package keys

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"filippo.io/edwards25519"
)

// PublicPrefix starts every public key in its text form.
const PublicPrefix = "ed25519:"

// InsecureError reports a key or policy file whose permissions let someone
// other than its owner read or change it.
type InsecureError struct {
	Path string
	Mode os.FileMode
	What string // "read or write" for keys, "write" for policy files
}

// Error names who holds the access refused (the file's group, others, or
// both) and what they may do, from the mode itself: a 0640 key is one its
// group may read. The fix it gives takes away only that access: a policy
// the service reads as another account must stay readable to it.
func (e *InsecureError) Error() string {
	refused := os.FileMode(0o077) // a key: any access but its owner's
	if e.What == "write" {
		refused = 0o022
	}
	bad := e.Mode.Perm() & refused
	var who []string
	if bad&0o070 != 0 {
		who = append(who, "its group")
	}
	if bad&0o007 != 0 {
		who = append(who, "others")
	}
	var may, chmod []string
	for _, p := range []struct {
		bit  os.FileMode
		verb string
		flag string
	}{{0o044, "read", "r"}, {0o022, "write", "w"}, {0o011, "execute", "x"}} {
		if bad&p.bit != 0 {
			may = append(may, p.verb)
			chmod = append(chmod, p.flag)
		}
	}
	if len(who) == 0 { // not from a check of this package's: say what it was
		return fmt.Sprintf("%s has mode %04o: only its owner may %s it", e.Path, e.Mode.Perm(), e.What)
	}
	return fmt.Sprintf("%s has mode %04o: %s may %s it (chmod go-%s %s)", e.Path, e.Mode.Perm(), andList(who), andList(may), strings.Join(chmod, ""), e.Path)
}

// andList joins words as a sentence lists them: "a", "a and b", "a, b and c".
func andList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}

// Public is an ed25519 public key.
type Public ed25519.PublicKey

// String returns the trust.toml form of the key.
func (p Public) String() string {
	return PublicPrefix + base64.StdEncoding.EncodeToString(p)
}

// ID returns the key's identifier: the hex sha256 of its raw bytes. DSSE
// signatures carry it as their keyid.
func (p Public) ID() string {
	sum := sha256.Sum256(p)
	return hex.EncodeToString(sum[:])
}

// ParsePublic reads a key in the form printed by [Public.String].
func ParsePublic(s string) (Public, error) {
	rest, ok := strings.CutPrefix(s, PublicPrefix)
	if !ok {
		return nil, fmt.Errorf("public key %q: want %q followed by base64", s, PublicPrefix)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("public key %q: %w", s, err)
	}
	return publicFromRaw(raw, fmt.Sprintf("%q", s))
}

// ParsePublicPEM reads a key in the form printed by [Public.PEM]: a PKIX
// "PUBLIC KEY" PEM block of an ed25519 key, and nothing else. It reads the
// DER by its one fixed prefix rather than with crypto/x509, whose
// initialisation every prod-write process would pay (docs/PERFORMANCE.md).
func ParsePublicPEM(b []byte) (Public, error) {
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, errors.New("no PEM \"PUBLIC KEY\" block")
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, errors.New("something follows the PEM \"PUBLIC KEY\" block")
	}
	raw, ok := bytes.CutPrefix(block.Bytes, pkixPrefix)
	if !ok || len(block.Bytes) != len(pkixPrefix)+ed25519.PublicKeySize {
		return nil, errors.New("the PEM \"PUBLIC KEY\" block is not an ed25519 key (RFC 8410)")
	}
	return publicFromRaw(raw, "in the PEM block")
}

// publicFromRaw checks a key's raw bytes; name says which key in errors.
func publicFromRaw(raw []byte, name string) (Public, error) {
	s := name
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key %s: %d bytes, want %d", s, len(raw), ed25519.PublicKeySize)
	}
	// A key of small order (the neutral element and its kin) verifies a
	// forged signature for any message, under ZIP-215 (Verify) as under
	// crypto/ed25519: refuse it, and anything that is not a point at all.
	p, err := new(edwards25519.Point).SetBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("public key %s is not a valid ed25519 point", s)
	}
	if new(edwards25519.Point).MultByCofactor(p).Equal(edwards25519.NewIdentityPoint()) == 1 {
		return nil, fmt.Errorf("public key %s has small order: anyone could sign as it", s)
	}
	return Public(bytes.Clone(raw)), nil
}

// Private is an ed25519 private key able to sign DSSE envelopes. It signs
// with crypto/ed25519, inside Go's FIPS 140-3 module
// (docs/adr/0013-signature-rule.md).
type Private struct {
	priv ed25519.PrivateKey
	pub  Public
}

// Generate makes a new key from crypto/rand.
func Generate() (*Private, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, err
	}
	return FromSeed(seed), nil
}

// FromSeed builds a key from a 32-byte seed, as ed25519.NewKeyFromSeed
// does; it panics if the seed is not 32 bytes.
func FromSeed(seed []byte) *Private {
	if len(seed) != ed25519.SeedSize {
		panic("keys: bad seed length")
	}
	priv := ed25519.NewKeyFromSeed(seed)
	return &Private{priv: priv, pub: Public(priv[ed25519.SeedSize:])}
}

// Public returns the public half.
func (k *Private) Public() Public { return k.pub }

// Sign implements dsse.Signer: a pure ed25519 signature (RFC 8032 §5.1.6).
func (k *Private) Sign(_ context.Context, data []byte) ([]byte, error) {
	return ed25519.Sign(k.priv, data), nil
}

// KeyID implements dsse.Signer.
func (k *Private) KeyID() (string, error) { return k.Public().ID(), nil }

// WriteNew stores a new key at path with mode 0600, never overwriting an
// existing file.
func (k *Private) WriteNew(path string) error {
	data := k.MarshalPEM()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// MarshalPEM returns the key file's contents: the private key as PKCS#8
// v1 in a PEM "PRIVATE KEY" block, as crypto/x509 writes it (a test holds
// them equal) and [Load] reads it.
func (k *Private) MarshalPEM() []byte {
	der := append(append([]byte{}, pkcs8Prefix...), k.priv.Seed()...)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// PEM returns the public key as a PKIX (SubjectPublicKeyInfo, RFC 8410)
// PEM "PUBLIC KEY" block: the form cosign (verify-blob --key), openssl and
// crypto/x509.ParsePKIXPublicKey take.
func (p Public) PEM() []byte {
	der := append(append([]byte{}, pkixPrefix...), p...)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// pkixPrefix is the DER of an ed25519 SubjectPublicKeyInfo up to the key's
// 32 bytes: SEQUENCE { SEQUENCE { OID 1.3.101.112 }, BIT STRING (0 unused
// bits) }, as crypto/x509.MarshalPKIXPublicKey writes it (a test holds
// them equal).
var pkixPrefix = []byte{0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00}

// Load reads a private key file, refusing one whose mode lets group or
// others read or write it.
func Load(path string) (*Private, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return LoadFile(f, path)
}

// LoadFile is [Load] of a key file already open, named path in messages:
// the runner service reads the key a caller opened and handed over. The
// file must be regular, at most 4 KiB, and readable by its owner only.
func LoadFile(f *os.File, path string) (*Private, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("key %s: not a regular file: %w", path, ErrNotAKey)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, &InsecureError{Path: path, Mode: fi.Mode(), What: "read or write"}
	}
	// ReadAt: a descriptor handed over shares its offset with the caller.
	data := make([]byte, 4096)
	n, err := f.ReadAt(data, 0)
	if n == 0 && (err == nil || errors.Is(err, io.EOF)) {
		return nil, fmt.Errorf("key %s is empty: %w", path, ErrNotAKey)
	}
	if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
		return nil, fmt.Errorf("reading key %s: %w", path, err)
	}
	block, _ := pem.Decode(data[:n])
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("key %s holds no PEM \"PRIVATE KEY\" block: %w", path, ErrNotAKey)
	}
	seed, err := parsePKCS8Seed(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	return FromSeed(seed), nil
}

// ErrNotAKey is returned by [Load] for a file that holds no ed25519 private
// key in PKCS#8 PEM form.
var ErrNotAKey = errors.New("not an ed25519 private key")

// Verifier checks signatures made by one public key.
type Verifier struct{ Key Public }

// Verify checks sig over data, by the rule of [Verify].
func (v Verifier) Verify(_ context.Context, data, sig []byte) error {
	if !Verify(v.Key, data, sig) {
		return errors.New("ed25519: invalid signature")
	}
	return nil
}

// Warm builds, ahead of their first use, the tables ed25519 signing and
// verification use: crypto/ed25519's base-point table (about a millisecond
// of CPU, built when a key is first derived or used) and the one
// verification uses. run calls Warm in the background so that this overlaps
// with reading its configuration on another core instead of adding to its
// latency (docs/adr/0008-run-latency.md); a long-lived process has no need
// of it.
func Warm() {
	ed25519.NewKeyFromSeed(warmSeed)
	Verify(warmKey, nil, warmSig)
}

// warmSeed, warmKey and warmSig are RFC 8032's test 1: any valid pair will
// do.
var (
	warmSeed = []byte{0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4, 0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60}
	warmKey  = Public{0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07, 0x3a, 0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07, 0x51, 0x1a}
	warmSig  = []byte{0xe5, 0x56, 0x43, 0x00, 0xc3, 0x60, 0xac, 0x72, 0x90, 0x86, 0xe2, 0xcc, 0x80, 0x6e, 0x82, 0x8a, 0x84, 0x87, 0x7f, 0x1e, 0xb8, 0xe5, 0xd9, 0x74, 0xd8, 0x73, 0xe0, 0x65, 0x22, 0x49, 0x01, 0x55, 0x5f, 0xb8, 0x82, 0x15, 0x90, 0xa3, 0x3b, 0xac, 0xc6, 0x1e, 0x39, 0x70, 0x1c, 0xf9, 0xb4, 0x6b, 0xd2, 0x5b, 0xf5, 0xf0, 0x59, 0x5b, 0xbe, 0x24, 0x65, 0x51, 0x41, 0x43, 0x8e, 0x7a, 0x10, 0x0b}
)
