package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
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
	runNoops(t, w, "one", "two", "three")
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

// replay --checkpoint with a checkpoint note: the journal whose tree it
// signs replays; one cut after it finds the tail cut off; one whose first
// entries are another tree (rewritten, and its note re-signed with the
// runner key for the other tree) is refused against the note kept from
// before, though its own chain and signatures verify.
func TestReplayCheckpointNote(t *testing.T) {
	w := newAPIWorld(t)
	runNoops(t, w, "one", "two")
	ctx := context.Background()
	head, err := localAPI{f: w.local}.ReceiptsCheckpoint(ctx, api.ReceiptsCheckpointRequest{Note: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	note := filepath.Join(dir, "head.note")
	if err := os.WriteFile(note, []byte(head.Note), 0o644); err != nil {
		t.Fatal(err)
	}
	replay := func(checkpoint string) (int, string) {
		code, stdout, stderr := w.h.run("replay", "--checkpoint", checkpoint)
		return code, stdout + stderr
	}
	if code, out := replay(note); code != 0 {
		t.Fatalf("replay against its own note: exit %d\n%s", code, out)
	}
	journal := filepath.Join(w.h.dir, "state", "journal", "receipts.jsonl")
	whole, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(whole, []byte("\n"))
	// Cut after the note: two runs' four entries become one run's two.
	if err := os.WriteFile(journal, bytes.Join(lines[:2], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := replay(note); code != 1 || !strings.Contains(out, "FAIL truncated") {
		t.Errorf("replay of a journal cut after its note: exit %d\n%s", code, out)
	}
	// The same size, another tree: the note kept from before refuses it.
	// (A note the runner key signs for that tree verifies: the runner key
	// alone cannot tell a rewrite, which is what a kept note is for.)
	if err := os.WriteFile(journal, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := w.local.Config()
	if err != nil {
		t.Fatal(err)
	}
	k, err := keys.Load(c.RunnerKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := receipts.TreeOf(bytes.NewReader([]byte("{}\n{}\n{}\n{}\n")))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := receipts.SignNoteCheckpoint(k, receipts.NoteOrigin(runner.JournalHost(c.Host)), other, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(note, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := replay(note); code != 1 || !strings.Contains(out, "FAIL chain_broken") || !strings.Contains(out, "not the tree the checkpoint note signs") {
		t.Errorf("replay against a note of another tree: exit %d\n%s", code, out)
	}
	// A note of another host's journal.
	elsewhere, err := receipts.SignNoteCheckpoint(k, receipts.NoteOrigin("elsewhere"), other, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(note, elsewhere, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := replay(note); code != 1 || !strings.Contains(out, "wrong_host") && !strings.Contains(out, "host \"elsewhere\"") {
		t.Errorf("replay against another host's note: exit %d\n%s", code, out)
	}
}

// runNoops runs noop once for each name, on a standing go: two journal
// entries each.
func runNoops(t *testing.T, w *apiWorld, names ...string) {
	t.Helper()
	for _, name := range names {
		fp := w.h.plan("noop", "--param", "name="+name)
		if code, _, stderr := w.h.run("gera", "go", fp, "--key", w.h.key("gera")); code != 0 {
			t.Fatal(stderr)
		}
		if code, _, stderr := w.h.run("run", fp); code != 0 {
			t.Fatal(stderr)
		}
	}
}
