package receipts

import (
	"bytes"
	"testing"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/pkg/keys"
)

func TestNoteCheckpointReadByOtherTools(t *testing.T) {
	k := keys.FromSeed(bytes.Repeat([]byte{7}, 32))
	tr, err := TreeOf(bytes.NewReader(journalOf(5)))
	if err != nil {
		t.Fatal(err)
	}
	origin := NoteOrigin("db1")
	b, err := SignNoteCheckpoint(k, origin, tr, 5)
	if err != nil {
		t.Fatal(err)
	}
	v, _, _ := NoteVerifier(origin, k.Public())
	if _, err := note.Open(b, note.VerifierList(v)); err != nil {
		t.Fatal(err)
	}
	cp, _, _, err := log.ParseCheckpoint(b, origin, v)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := tr.Root(5)
	if cp.Size != 5 || !bytes.Equal(cp.Hash, root) {
		t.Fatalf("got %d %x", cp.Size, cp.Hash)
	}
	if _, err := OpenNoteCheckpoint(b, origin, k.Public()); err != nil {
		t.Fatal(err)
	}
	other := keys.FromSeed(bytes.Repeat([]byte{8}, 32))
	for name, c := range map[string]struct {
		b      []byte
		origin string
		pub    keys.Public
	}{
		"other key":    {b, origin, other.Public()},
		"other origin": {b, NoteOrigin("db2"), k.Public()},
		"malformed":    {[]byte("nonsense"), origin, k.Public()},
		"empty":        {nil, origin, k.Public()},
	} {
		if _, err := OpenNoteCheckpoint(c.b, c.origin, c.pub); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// FuzzOpenNoteCheckpoint: whatever bytes are handed over as a checkpoint
// note, opening it never panics, and a note it accepts is one the runner
// key signed for this origin, whose body formats/log parses alike.
func FuzzOpenNoteCheckpoint(f *testing.F) {
	k := keys.FromSeed(bytes.Repeat([]byte{7}, 32))
	origin := NoteOrigin("db1")
	for _, n := range []int{0, 1, 5} {
		tr, err := TreeOf(bytes.NewReader(journalOf(n)))
		if err != nil {
			f.Fatal(err)
		}
		b, err := SignNoteCheckpoint(k, origin, tr, uint64(n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("prod-write/receipts/db1\n3\nAAAA\n\n— prod-write/receipts/db1 AAAA\n"))
	v, _, err := NoteVerifier(origin, k.Public())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := OpenNoteCheckpoint(b, origin, k.Public())
		if err != nil {
			return
		}
		if cp.Origin != origin {
			t.Fatalf("accepted origin %q", cp.Origin)
		}
		if _, err := note.Open(b, note.VerifierList(v)); err != nil {
			t.Fatalf("accepted a note the library does not open: %v", err)
		}
	})
}
