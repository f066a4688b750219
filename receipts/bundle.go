package receipts

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
)

// RunBundleV1 is the media type of a run bundle: one run's in-toto
// attestation with the proofs that its receipts are in the journal's
// Merkle tree, and the runner-signed checkpoint of that tree
// (docs/adr/0044-journal-merkle-log.md), so that one run can be verified
// alone, from the runner's public key.
const RunBundleV1 = "application/vnd.prod-write.run-bundle.v1+json"

// RunBundle is one line of `receipts export --in-toto --proofs`.
type RunBundle struct {
	MediaType    string         `json:"mediaType"`
	DSSEEnvelope *dsse.Envelope `json:"dsseEnvelope"`
	// Inclusion proves the run's intent receipt, then its outcome
	// receipt when it has one, leaves of the tree Checkpoint signs.
	Inclusion []Inclusion `json:"inclusion"`
	// Checkpoint is the C2SP signed note (origin, size, root hash) of the
	// journal's tree at the export, signed by the runner key.
	Checkpoint string `json:"checkpoint"`
}

// Inclusion is an RFC 6962 inclusion proof of one journal line: its
// LineHash (hex, as the attestation names it) is the leaf at LeafIndex.
type Inclusion struct {
	Seq        uint64   `json:"seq"`
	LineSHA256 string   `json:"line_sha256"`
	LeafIndex  uint64   `json:"leaf_index"`
	Hashes     [][]byte `json:"hashes"`
}

// CheckpointNotOfJournalError refuses a checkpoint note to prove an export
// against: signed by the runner key for the journal's origin, but not of
// the journal's tree (a larger tree, or another root at its size). For a
// note the witnesses cosigned, that is the alarm a cut or rewritten
// journal raises.
type CheckpointNotOfJournalError struct{ Reason string }

func (e *CheckpointNotOfJournalError) Error() string {
	return "the checkpoint is not of this journal: " + e.Reason
}

// ExportInTotoBundlesAt is [ExportInToto] writing each run as a
// [RunBundle]: its attestation, inclusion proofs of its receipts in the
// journal's tree, and that tree's checkpoint. The journal is read twice,
// the tree first. Every proof is against at, a checkpoint note of the
// journal's tree at an earlier size or the head (one the witnesses
// cosigned: receipts export --witnessed), carried as it is, cosignatures
// and all; a run with a receipt after at's size is left out, and counted
// in left. With at nil, every proof is against the head, whose checkpoint
// k signs under origin.
func ExportInTotoBundlesAt(ctx context.Context, journal io.ReadSeeker, p *approval.Policy, k *keys.Private, origin string, at []byte, w io.Writer) (n, left int, err error) {
	t := &Tree{}
	leaf := map[string]uint64{}
	err = Scan(journal, func(l Line) error {
		if l.Torn {
			return nil
		}
		h := l.Hash
		if l.Long == 0 {
			h = LineHash(l.Bytes)
		}
		if _, dup := leaf[h]; !dup {
			leaf[h] = t.Size()
		}
		return t.AppendLineHash(h)
	})
	if err != nil {
		return 0, 0, err
	}
	note, size := at, t.Size()
	if at == nil {
		if note, err = SignNoteCheckpoint(k, origin, t, size); err != nil {
			return 0, 0, err
		}
	} else {
		cp, err := OpenNoteCheckpoint(at, origin, k.Public())
		if err != nil {
			return 0, 0, err
		}
		if cp.Size > t.Size() {
			return 0, 0, &CheckpointNotOfJournalError{Reason: fmt.Sprintf("it signs a tree of %d entries; the journal holds %d: entries were cut off", cp.Size, t.Size())}
		}
		root, err := t.Root(cp.Size)
		if err != nil {
			return 0, 0, err
		}
		if !bytes.Equal(root, cp.Hash) {
			return 0, 0, &CheckpointNotOfJournalError{Reason: fmt.Sprintf("its tree of %d entries has another root than the journal's first %d: entries were rewritten", cp.Size, cp.Size)}
		}
		size = cp.Size
	}
	if _, err := journal.Seek(0, io.SeekStart); err != nil {
		return 0, 0, err
	}
	errAfter := errors.New("after the checkpoint")
	prove := func(ref ReceiptRef) (Inclusion, error) {
		i, ok := leaf[ref.SHA256]
		if !ok {
			return Inclusion{}, fmt.Errorf("receipt %d (line %.12s…) is not a leaf of the journal's tree", ref.Seq, ref.SHA256)
		}
		if i >= size {
			return Inclusion{}, errAfter
		}
		hashes, err := t.InclusionProof(i, size)
		if err != nil {
			return Inclusion{}, err
		}
		if hashes == nil {
			hashes = [][]byte{}
		}
		return Inclusion{Seq: ref.Seq, LineSHA256: ref.SHA256, LeafIndex: i, Hashes: hashes}, nil
	}
	n, err = exportRuns(ctx, journal, p, k, func(env *dsse.Envelope, pred *RunPredicate) error {
		b := RunBundle{MediaType: RunBundleV1, DSSEEnvelope: env, Checkpoint: string(note)}
		in, err := prove(pred.Intent)
		if err == nil {
			b.Inclusion = append(b.Inclusion, in)
		}
		if err == nil && pred.Outcome != nil {
			var out Inclusion
			out, err = prove(pred.Outcome.ReceiptRef)
			b.Inclusion = append(b.Inclusion, out)
		}
		if errors.Is(err, errAfter) {
			left++
			return errSkip
		}
		if err != nil {
			return err
		}
		line, err := json.Marshal(b)
		if err != nil {
			return err
		}
		_, err = w.Write(append(line, '\n'))
		return err
	})
	return n, left, err
}

// verifyBundleProofs checks b's proofs of the run st attests: the
// checkpoint is a note signed by pub for the run's host's origin; one
// proof for the intent and one for the outcome when the run has one, each
// naming the receipt the attestation names (sequence number and line
// hash), each an RFC 6962 inclusion proof into the checkpoint's root. It
// returns the checkpoint's tree size, or the reason it refuses.
func verifyBundleProofs(b *RunBundle, st *runStatement, pub keys.Public) (uint64, string) {
	pred := &st.Predicate
	origin := NoteOrigin(pred.Host)
	cp, err := OpenNoteCheckpoint([]byte(b.Checkpoint), origin, pub)
	if err != nil {
		return 0, err.Error()
	}
	want := []ReceiptRef{pred.Intent}
	if pred.Outcome != nil {
		want = append(want, pred.Outcome.ReceiptRef)
	}
	if len(b.Inclusion) != len(want) {
		return 0, fmt.Sprintf("%d inclusion proofs for a run of %d receipts", len(b.Inclusion), len(want))
	}
	for i, ref := range want {
		in := b.Inclusion[i]
		if in.Seq != ref.Seq || in.LineSHA256 != ref.SHA256 {
			return 0, fmt.Sprintf("proof %d is of receipt %d (line %.12s…), the attestation names receipt %d (line %.12s…)", i+1, in.Seq, in.LineSHA256, ref.Seq, ref.SHA256)
		}
		h, err := hex.DecodeString(in.LineSHA256)
		if err != nil || len(h) != 32 {
			return 0, fmt.Sprintf("proof %d: line_sha256 is not 32 bytes of hex", i+1)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, in.LeafIndex, cp.Size, rfc6962.DefaultHasher.HashLeaf(h), in.Hashes, cp.Hash); err != nil {
			return 0, fmt.Sprintf("receipt %d is not in the tree the checkpoint signs (%d entries): %v", ref.Seq, cp.Size, err)
		}
	}
	return cp.Size, ""
}
