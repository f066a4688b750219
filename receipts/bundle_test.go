package receipts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// bundles is the world's export with proofs, a bundle a line.
func (w *world) bundles() []receipts.RunBundle {
	w.t.Helper()
	out := filepath.Join(w.t.TempDir(), "runs.bundles.jsonl")
	w.pw("receipts", "export", "--in-toto", "--proofs", "--out", out)
	data, err := os.ReadFile(out)
	if err != nil {
		w.t.Fatal(err)
	}
	var bs []receipts.RunBundle
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var b receipts.RunBundle
		if err := json.Unmarshal(line, &b); err != nil {
			w.t.Fatal(err)
		}
		bs = append(bs, b)
	}
	return bs
}

func encodeBundles(t *testing.T, bs ...receipts.RunBundle) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, b := range bs {
		line, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(append(line, '\n'))
	}
	return buf.Bytes()
}

// A run bundle verifies alone, from the runner's public key: its
// attestation, and its intent and outcome receipts as leaves of the tree
// the runner-signed checkpoint names, which is the journal's head (the
// note receipts checkpoint --note signs). Each proof that does not hold is
// refused, though the envelope's signature still verifies (issue 32).
func TestRunBundlesVerifyAlone(t *testing.T) {
	w := newWorld(t)
	bs := w.bundles()
	if len(bs) != 5 {
		t.Fatalf("%d bundles, want one per run (5)", len(bs))
	}
	head := w.pw("receipts", "checkpoint", "--note")
	for i, b := range bs {
		if b.MediaType != receipts.RunBundleV1 || len(b.Inclusion) != 2 || b.Checkpoint != head {
			t.Fatalf("bundle %d: %s, %d proofs, checkpoint %q; want %s, 2 and the head's %q", i, b.MediaType, len(b.Inclusion), b.Checkpoint, receipts.RunBundleV1, head)
		}
		// Each bundle alone.
		v, err := receipts.VerifyExport(bytes.NewReader(encodeBundles(t, b)), w.runner.Public())
		if err != nil || v.Runs != 1 || v.Proved != 1 || v.TreeSize != uint64(len(w.journal)) {
			t.Fatalf("bundle %d alone: %+v, %v; want 1 run proved in the tree of %d", i, v, err, len(w.journal))
		}
	}
	other, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	otherNote := func(origin string, k *keys.Private) string {
		tr, err := receipts.TreeOf(strings.NewReader(strings.Join(w.journal, "\n") + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := receipts.SignNoteCheckpoint(k, origin, tr, tr.Size())
		if err != nil {
			t.Fatal(err)
		}
		return string(n)
	}
	origin := strings.SplitN(head, "\n", 2)[0]
	edit := func(f func(b *receipts.RunBundle)) []byte {
		b := bs[1]
		b.Inclusion = append([]receipts.Inclusion(nil), b.Inclusion...)
		for i := range b.Inclusion {
			b.Inclusion[i].Hashes = append([][]byte(nil), b.Inclusion[i].Hashes...)
		}
		f(&b)
		return encodeBundles(t, b)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"a proof's hash changed", edit(func(b *receipts.RunBundle) {
			h := bytes.Clone(b.Inclusion[0].Hashes[0])
			h[0] ^= 1
			b.Inclusion[0].Hashes[0] = h
		}), "is not in the tree the checkpoint signs"},
		{"another leaf index", edit(func(b *receipts.RunBundle) { b.Inclusion[1].LeafIndex++ }), "is not in the tree the checkpoint signs"},
		{"another run's proof", edit(func(b *receipts.RunBundle) { b.Inclusion[0] = bs[0].Inclusion[0] }), "proof 1 is of receipt"},
		{"the outcome's proof left out", edit(func(b *receipts.RunBundle) { b.Inclusion = b.Inclusion[:1] }), "1 inclusion proofs for a run of 2 receipts"},
		{"a checkpoint another key signed", edit(func(b *receipts.RunBundle) { b.Checkpoint = otherNote(origin, other) }), "not signed by the runner key"},
		{"a checkpoint of another host's log", edit(func(b *receipts.RunBundle) { b.Checkpoint = otherNote("prod-write/receipts/elsewhere", w.runner) }), "checkpoint"},
		{"another media type", edit(func(b *receipts.RunBundle) { b.MediaType = "application/vnd.dev.sigstore.bundle.v0.3+json" }), "mediaType"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := receipts.VerifyExport(bytes.NewReader(tc.b), w.runner.Public())
			var re *receipts.ExportRefusedError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: want an ExportRefusedError saying %q", err, tc.want)
			}
		})
	}
}
