package receipts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
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
// refused, though the envelope's signature still verifies.
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
		v, err := receipts.VerifyExportWitnessed(bytes.NewReader(encodeBundles(t, b)), w.runner.Public(), receipts.WitnessQuorum{})
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
			_, err := receipts.VerifyExportWitnessed(bytes.NewReader(tc.b), w.runner.Public(), receipts.WitnessQuorum{})
			var re *receipts.ExportRefusedError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v: want an ExportRefusedError saying %q", err, tc.want)
			}
		})
	}
}

// At a gate that asks for k of n witnesses (receipts verify-export
// --witnesses), a bundle verifies only when its checkpoint carries k
// cosignatures by the policy's witnesses: the head's bundles cosigned by
// two of three pass at 2 and fail at 3; a cosignature moved from another
// checkpoint, or a plain attestation with no checkpoint, is refused. And
// an export proved against an earlier checkpoint (export --witnessed)
// proves every run within it, leaves the later out, and refuses a
// checkpoint that is not of the journal's tree.
func TestRunBundlesWitnessed(t *testing.T) {
	w := newWorld(t)
	bs := w.bundles()
	head := bs[0].Checkpoint
	wa, wb, wc := newTestWitness(t, "a.test"), newTestWitness(t, "b.test"), newTestWitness(t, "c.test")
	policy := witnessPolicy(t, w.runner, wa, wb, wc)
	cosigned := string(cosign(t, []byte(head), wa, wb))
	for i := range bs {
		bs[i].Checkpoint = cosigned
	}
	verify := func(b []byte, k int) (*receipts.ExportVerified, error) {
		return receipts.VerifyExportWitnessed(bytes.NewReader(b), w.runner.Public(), receipts.WitnessQuorum{Policy: policy, K: k})
	}
	if v, err := verify(encodeBundles(t, bs...), 2); err != nil || v.Proved != 5 || v.Witnessed != 2 {
		t.Fatalf("two of three asked for two: %+v, %v", v, err)
	}
	var refused *receipts.ExportRefusedError
	if _, err := verify(encodeBundles(t, bs...), 3); !errors.As(err, &refused) || !strings.Contains(err.Error(), "cosigned by 2 of the trust policy's witnesses") {
		t.Fatalf("two of three asked for three: %v", err)
	}
	// wc's cosignature of another checkpoint (the tree of the first two
	// runs) moved onto the head's.
	tree, err := receipts.TreeOf(strings.NewReader(strings.Join(w.journal, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	origin, _, _ := strings.Cut(head, "\n")
	early, err := receipts.SignNoteCheckpoint(w.runner, origin, tree, 4)
	if err != nil {
		t.Fatal(err)
	}
	other := string(cosign(t, early, wc))
	moved := bs[0]
	moved.Checkpoint = cosigned + other[strings.LastIndex(other, "\n— c.test"):][1:]
	if _, err := verify(encodeBundles(t, moved), 3); !errors.As(err, &refused) || !strings.Contains(err.Error(), "does not verify over this checkpoint") {
		t.Fatalf("a cosignature moved from another checkpoint: %v", err)
	}
	plain := w.pwFile(t, "receipts", "export", "--in-toto")
	if _, err := verify(plain, 1); !errors.As(err, &refused) || !strings.Contains(err.Error(), "no checkpoint for witnesses to cosign") {
		t.Fatalf("a plain attestation at a gate asking for a witness: %v", err)
	}
	if v, err := verify(plain, 0); err != nil || v.Runs != 5 {
		t.Fatalf("a plain attestation with no quorum asked for: %+v, %v", v, err)
	}

	// Proved against the early checkpoint, cosigned: the first two runs,
	// the other three left out.
	trust, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	journal := bytes.NewReader([]byte(strings.Join(w.journal, "\n") + "\n"))
	var out bytes.Buffer
	n, left, err := receipts.ExportInTotoBundlesAt(context.Background(), journal, trust, w.runner, origin, []byte(other), &out)
	if err != nil || n != 2 || left != 3 {
		t.Fatalf("export at the early checkpoint: %d runs, %d left, %v; want 2 and 3", n, left, err)
	}
	if v, err := receipts.VerifyExportWitnessed(&out, w.runner.Public(), receipts.WitnessQuorum{Policy: policy, K: 1}); err != nil || v.Proved != 2 || v.TreeSize != 4 {
		t.Fatalf("the early export at a gate asking for one witness: %+v, %v", v, err)
	}
	// A checkpoint of a rewritten tree, and one past the journal's end.
	lines := w.edit(append([]string(nil), w.journal...), 1, w.runner, true, func(r *receipts.Receipt) { r.Time = r.Time.Add(time.Second) })
	forged, err := receipts.TreeOf(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]uint64{"rewritten": 4, "longer": 0} {
		tr := forged
		if size == 0 {
			tr, size = tree, tree.Size()
			journal = bytes.NewReader([]byte(strings.Join(w.journal[:6], "\n") + "\n"))
		} else {
			journal = bytes.NewReader([]byte(strings.Join(w.journal, "\n") + "\n"))
		}
		cp, err := receipts.SignNoteCheckpoint(w.runner, origin, tr, size)
		if err != nil {
			t.Fatal(err)
		}
		var nj *receipts.CheckpointNotOfJournalError
		if _, _, err := receipts.ExportInTotoBundlesAt(context.Background(), journal, trust, w.runner, origin, cp, io.Discard); !errors.As(err, &nj) {
			t.Errorf("%s: %v, want a checkpoint not of the journal", name, err)
		}
	}
}

// pwFile is what the prod-write command args writes to --out.
func (w *world) pwFile(t *testing.T, args ...string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	w.pw(append(args, "--out", out)...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
