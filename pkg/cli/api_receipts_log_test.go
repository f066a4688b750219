package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
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
	}{{"in-process", localapi.API{Env: &w.local.Env}}, {"socket", localapi.ServiceClient{Env: &w.client.Env}}} {
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
	head, err := localapi.API{Env: &w.local.Env}.ReceiptsCheckpoint(ctx, api.ReceiptsCheckpointRequest{Note: true})
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

// receipts consistency proves an earlier checkpoint note's tree a prefix
// of a later one's, and the proof verifies alone: with
// transparency-dev/merkle's proof.VerifyConsistency against the notes'
// roots (once x/mod's note verified them), and with consistency --verify.
// A note no runner signed, a forked view (a note of the same size and
// another tree, signed by the runner key), another host's notes, and a
// journal rewritten or cut after the notes are refused; so is a proof
// edited on its way to --verify.
func TestReceiptsConsistency(t *testing.T) {
	w := newAPIWorld(t)
	ctx := context.Background()
	c, err := w.local.Config()
	if err != nil {
		t.Fatal(err)
	}
	k, err := keys.Load(c.RunnerKey)
	if err != nil {
		t.Fatal(err)
	}
	host := runner.JournalHost(c.Host)
	dir := t.TempDir()
	note := func(name string) (string, string) {
		t.Helper()
		r, err := localapi.API{Env: &w.local.Env}.ReceiptsCheckpoint(ctx, api.ReceiptsCheckpointRequest{Note: true})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(r.Note), 0o644); err != nil {
			t.Fatal(err)
		}
		return r.Note, file
	}
	runNoops(t, w, "one")
	oldNote, oldFile := note("old.note")
	runNoops(t, w, "two", "three")
	newNote, newFile := note("new.note")
	for _, im := range []struct {
		name string
		api  api.API
	}{{"in-process", localapi.API{Env: &w.local.Env}}, {"socket", localapi.ServiceClient{Env: &w.client.Env}}} {
		r, err := im.api.ReceiptsConsistency(ctx, api.ReceiptsConsistencyRequest{Old: oldNote, New: newNote})
		if err != nil {
			t.Fatalf("%s: %v", im.name, err)
		}
		old, err := receipts.OpenNoteCheckpoint([]byte(oldNote), receipts.NoteOrigin(host), k.Public())
		if err != nil {
			t.Fatal(err)
		}
		new, err := receipts.OpenNoteCheckpoint([]byte(newNote), receipts.NoteOrigin(host), k.Public())
		if err != nil {
			t.Fatal(err)
		}
		if r.OldSize != 2 || r.NewSize != 6 || len(r.Hashes) == 0 {
			t.Errorf("%s: %+v", im.name, r)
		}
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old.Size, new.Size, r.Hashes, old.Hash, new.Hash); err != nil {
			t.Errorf("%s: the proof does not verify alone: %v", im.name, err)
		}
		// The same note twice: an empty proof.
		if r, err := im.api.ReceiptsConsistency(ctx, api.ReceiptsConsistencyRequest{Old: newNote, New: newNote}); err != nil || len(r.Hashes) != 0 {
			t.Errorf("%s: a note with itself: %+v %v", im.name, r, err)
		}
	}

	consistency := func(args ...string) (int, string) {
		code, stdout, stderr := w.h.run(append([]string{"receipts", "consistency"}, args...)...)
		return code, stdout + stderr
	}
	code, out := consistency(oldFile, newFile, "--json")
	if code != 0 {
		t.Fatalf("consistency --json: exit %d\n%s", code, out)
	}
	proofFile := filepath.Join(dir, "proof.json")
	if err := os.WriteFile(proofFile, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := consistency(oldFile, newFile, "--verify", proofFile); code != 0 || !strings.Contains(out, "verified: the tree of 2 entries is a prefix of the tree of 6") {
		t.Errorf("consistency --verify: exit %d\n%s", code, out)
	}
	// The proof edited: a hash, or the sizes it claims.
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(map[string]any){
		"a hash": func(d map[string]any) {
			d["hashes"].([]any)[0] = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
		},
		"no hash":  func(d map[string]any) { d["hashes"] = []any{} },
		"the size": func(d map[string]any) { d["old_size"] = 3 },
	} {
		var d map[string]any
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		edit(d)
		b, _ := json.Marshal(d)
		edited := filepath.Join(dir, "edited.json")
		if err := os.WriteFile(edited, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if code, out := consistency(oldFile, newFile, "--verify", edited); code != ExitRefused || !strings.Contains(out, "consistency refused") {
			t.Errorf("--verify of a proof with %s edited: exit %d\n%s", name, code, out)
		}
	}
	if code, out := consistency(newFile, oldFile); code != ExitUsage {
		t.Errorf("NEW before OLD: exit %d\n%s", code, out)
	}

	write := func(name string, b []byte) string {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	other, err := receipts.TreeOf(bytes.NewReader([]byte("{}\n{}\n")))
	if err != nil {
		t.Fatal(err)
	}
	forked, err := receipts.SignNoteCheckpoint(k, receipts.NoteOrigin(host), other, 2)
	if err != nil {
		t.Fatal(err)
	}
	elsewhereTree, err := receipts.TreeOf(bytes.NewReader([]byte("{}\n{}\n{}\n{}\n{}\n{}\n")))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := receipts.SignNoteCheckpoint(k, receipts.NoteOrigin("elsewhere"), other, 2)
	if err != nil {
		t.Fatal(err)
	}
	elsewhereNew, err := receipts.SignNoteCheckpoint(k, receipts.NoteOrigin("elsewhere"), elsewhereTree, 6)
	if err != nil {
		t.Fatal(err)
	}
	stranger := keys.FromSeed(bytes.Repeat([]byte{9}, 32))
	unsigned, err := receipts.SignNoteCheckpoint(stranger, receipts.NoteOrigin(host), other, 2)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		old, new string
		want     string
	}{
		"a forked view":          {write("forked.note", forked), newFile, "not the tree OLD signs"},
		"another host's notes":   {write("elsewhere.note", elsewhere), write("elsewhere-new.note", elsewhereNew), `this journal is "prod-write/receipts/` + host},
		"a note no runner signs": {write("unsigned.note", unsigned), newFile, "OLD: checkpoint note: checkpoint is not signed by the runner key"},
	} {
		if code, out := consistency(c.old, c.new); code != ExitRefused || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want %d and %q\n%s", name, code, ExitRefused, c.want, out)
		}
		// --verify refuses the notes as well, whatever the proof.
		if name != "another host's notes" {
			if code, out := consistency(c.old, c.new, "--verify", proofFile); code != ExitRefused {
				t.Errorf("--verify with %s: exit %d\n%s", name, code, out)
			}
		}
	}
	if code, out := consistency(write("junk.note", []byte("not a note\n")), newFile); code != ExitDataErr {
		t.Errorf("a file that is no note: exit %d\n%s", code, out)
	}

	journal := filepath.Join(w.h.dir, "state", "journal", "receipts.jsonl")
	whole, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(whole, []byte("\n"))
	// Cut after NEW's tree: it holds OLD's, not NEW's.
	if err := os.WriteFile(journal, bytes.Join(lines[:4], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := consistency(oldFile, newFile); code != ExitRefused || !strings.Contains(out, "NEW counts 6 entries; the journal holds 4") {
		t.Errorf("a journal cut short of NEW: exit %d\n%s", code, out)
	}
	// Rewritten under OLD (a line of the first two replaced).
	rewritten := bytes.Join(append([][]byte{lines[1], lines[0]}, lines[2:]...), nil)
	if err := os.WriteFile(journal, rewritten, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := consistency(oldFile, newFile); code != ExitRefused || !strings.Contains(out, "not the tree OLD signs") {
		t.Errorf("a journal rewritten under OLD: exit %d\n%s", code, out)
	}
}

// note is a checkpoint note of the first size entries of the world's
// journal, signed by its runner key; with lines, of the tree of those
// lines instead (another tree: a forked view).
func (w *apiWorld) note(t *testing.T, size uint64, lines ...string) string {
	t.Helper()
	c, err := w.local.Config()
	if err != nil {
		t.Fatal(err)
	}
	k, err := keys.Load(c.RunnerKey)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	if lines != nil {
		b = []byte(strings.Join(lines, ""))
	} else if b, err = os.ReadFile(c.JournalPath()); err != nil {
		t.Fatal(err)
	}
	tr, err := receipts.TreeOf(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	n, err := receipts.SignNoteCheckpoint(k, receipts.NoteOrigin(runner.JournalHost(c.Host)), tr, size)
	if err != nil {
		t.Fatal(err)
	}
	return string(n)
}
