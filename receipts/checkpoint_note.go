package receipts

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/pkg/keys"
)

// NoteOrigin is the C2SP tlog-checkpoint origin of host's journal; it is
// also the note key name the runner key signs under.
func NoteOrigin(host string) string { return "prod-write/receipts/" + host }

// noteSigner signs notes with the runner key; its key hash comes from the
// library's own verifier key, so nothing here computes note hashes.
type noteSigner struct {
	name string
	hash uint32
	key  *keys.Private
}

func (s noteSigner) Name() string    { return s.name }
func (s noteSigner) KeyHash() uint32 { return s.hash }
func (s noteSigner) Sign(msg []byte) ([]byte, error) {
	return s.key.Sign(context.Background(), msg)
}

// NoteVerifier is the note verifier for origin and the runner public key.
func NoteVerifier(origin string, pub keys.Public) (note.Verifier, string, error) {
	vkey, err := note.NewEd25519VerifierKey(origin, ed25519.PublicKey(pub))
	if err != nil {
		return nil, "", err
	}
	v, err := note.NewVerifier(vkey)
	return v, vkey, err
}

// SignNoteCheckpoint is a C2SP tlog-checkpoint of the first size leaves
// of t, signed as a note by k under origin.
func SignNoteCheckpoint(k *keys.Private, origin string, t *Tree, size uint64) ([]byte, error) {
	root, err := t.Root(size)
	if err != nil {
		return nil, err
	}
	v, _, err := NoteVerifier(origin, k.Public())
	if err != nil {
		return nil, err
	}
	body := log.Checkpoint{Origin: origin, Size: size, Hash: root}.Marshal()
	return note.Sign(&note.Note{Text: string(body)}, noteSigner{origin, v.KeyHash(), k})
}

// OpenNoteCheckpoint verifies a note checkpoint against origin and pub,
// and names what is wrong when it does not verify.
func OpenNoteCheckpoint(b []byte, origin string, pub keys.Public) (*log.Checkpoint, error) {
	v, _, err := NoteVerifier(origin, pub)
	if err != nil {
		return nil, err
	}
	n, err := note.Open(b, note.VerifierList(v))
	if err != nil {
		var unk *note.UnverifiedNoteError
		if errors.As(err, &unk) {
			return nil, fmt.Errorf("checkpoint is not signed by the runner key for %q", origin)
		}
		return nil, fmt.Errorf("checkpoint note: %w", err)
	}
	var cp log.Checkpoint
	if _, err := cp.Unmarshal([]byte(n.Text)); err != nil {
		return nil, fmt.Errorf("checkpoint body: %w", err)
	}
	if cp.Origin != origin {
		return nil, fmt.Errorf("checkpoint is for origin %q, not %q", cp.Origin, origin)
	}
	return &cp, nil
}
