package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/receipts"
)

// receipts prove's answer verifies alone, with the libraries a verifier
// not written here uses: the checkpoint note with the runner's public key
// (x/mod/sumdb/note, through OpenNoteCheckpoint), then the proof against
// the note's root (transparency-dev/merkle). A proof of a line the
// journal does not hold, or against a rewritten journal's root, fails.
func TestReceiptsProveVerifiesAlone(t *testing.T) {
	w := newAPIWorld(t)
	for _, name := range []string{"one", "two", "three"} {
		fp := w.h.plan("noop", "--param", "name="+name)
		if code, _, stderr := w.h.run("gera", "go", fp, "--key", w.h.key("gera")); code != 0 {
			t.Fatal(stderr)
		}
		if code, _, stderr := w.h.run("run", fp); code != 0 {
			t.Fatal(stderr)
		}
	}
	c, err := w.local.Config()
	if err != nil {
		t.Fatal(err)
	}
	k, err := keys.Load(c.RunnerKey)
	if err != nil {
		t.Fatal(err)
	}
	host := runner.JournalHost(c.Host)
	ctx := context.Background()
	journal, err := os.ReadFile(filepath.Join(w.h.dir, "state", "journal", "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(journal, []byte("\n"))
	for _, im := range []struct {
		name string
		api  api.API
	}{{"in-process", localAPI{f: w.local}}, {"socket", serviceAPI{f: w.client}}} {
		// receipts checkpoint --note signs the head's tree: the root a
		// proof in the whole journal is against.
		head, err := im.api.ReceiptsCheckpoint(ctx, api.ReceiptsCheckpointRequest{Note: true})
		if err != nil {
			t.Fatalf("%s: checkpoint --note: %v", im.name, err)
		}
		cp, err := receipts.OpenNoteCheckpoint([]byte(head.Note), receipts.NoteOrigin(host), k.Public())
		if err != nil {
			t.Fatalf("%s: checkpoint --note: %v", im.name, err)
		}
		whole, err := im.api.ReceiptsProve(ctx, api.ReceiptsProveRequest{Seq: 1})
		if err != nil {
			t.Fatal(err)
		}
		if cp.Size != 6 || !bytes.Equal(cp.Hash, whole.RootHash) || head.Checkpoint.Count != 6 {
			t.Errorf("%s: checkpoint --note says size %d root %x, the proof's tree %x, the DSSE head %d entries", im.name, cp.Size, cp.Hash, whole.RootHash, head.Checkpoint.Count)
		}
		for seq := uint64(1); seq <= 6; seq++ {
			for _, size := range []uint64{0, 6, seq} {
				r, err := im.api.ReceiptsProve(ctx, api.ReceiptsProveRequest{Seq: seq, Size: size})
				if err != nil {
					t.Fatalf("%s: prove %d in %d: %v", im.name, seq, size, err)
				}
				cp, err := receipts.OpenNoteCheckpoint([]byte(r.Checkpoint), receipts.NoteOrigin(host), k.Public())
				if err != nil {
					t.Fatalf("%s: the checkpoint of prove %d: %v", im.name, seq, err)
				}
				leaf := rfc6962.DefaultHasher.HashLeaf(mustHex(t, receipts.LineHash(bytes.TrimSuffix(lines[r.LeafIndex], []byte("\n")))))
				if err := proof.VerifyInclusion(rfc6962.DefaultHasher, r.LeafIndex, cp.Size, leaf, r.Hashes, cp.Hash); err != nil {
					t.Errorf("%s: receipt %d in %d: %v", im.name, seq, cp.Size, err)
				}
				other := rfc6962.DefaultHasher.HashLeaf(mustHex(t, receipts.LineHash([]byte(`{"not":"a line of this journal"}`))))
				if err := proof.VerifyInclusion(rfc6962.DefaultHasher, r.LeafIndex, cp.Size, other, r.Hashes, cp.Hash); err == nil {
					t.Errorf("%s: a line not in the journal proves included at %d", im.name, r.LeafIndex)
				}
			}
		}
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
