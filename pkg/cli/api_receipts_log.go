package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/receipts"
)

// newCmdReceiptsProve builds `receipts prove SEQ`.
func newCmdReceiptsProve(f *Factory) *cobra.Command {
	var size uint64
	cmd := &cobra.Command{
		Use:   "prove SEQ",
		Short: "Prove one receipt included in the journal's Merkle tree, with a signed checkpoint of the tree",
		Long: `prove prints an RFC 6962 inclusion proof of the receipt with sequence number
SEQ in the journal's Merkle tree (leaf i is the sha256 of journal line i), in
the tree of the first --size entries (default: the whole journal), and the
C2SP checkpoint note of that tree signed by the runner key. Anyone holding
the runner's public key verifies it alone: the note with
golang.org/x/mod/sumdb/note, then the proof against the note's root with
github.com/transparency-dev/merkle/proof.VerifyInclusion. Formats:
docs/adr/0044-journal-merkle-log.md.`,
		Example: "  prod-write receipts prove 12 --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || seq == 0 {
				return &usageError{msg: fmt.Sprintf("%q is not a sequence number", args[0])}
			}
			a, err := f.api()
			if err != nil {
				return err
			}
			r, err := a.ReceiptsProve(cmd.Context(), api.ReceiptsProveRequest{Seq: seq, Size: size})
			if err != nil {
				return err
			}
			if f.JSON {
				return printJSON(f.IO.Out, struct {
					FormatVersion int `json:"format_version"`
					*api.ReceiptsProveResult
				}{FormatVersion, r})
			}
			w := f.IO.Out
			fmt.Fprintf(w, "receipt %d is leaf %d of the tree of %d entries (%s)\n", r.Seq, r.LeafIndex, r.TreeSize, r.Origin)
			fmt.Fprintf(w, "root:  %s\n", base64.StdEncoding.EncodeToString(r.RootHash))
			fmt.Fprintf(w, "leaf:  %s (line sha256 %s)\n", base64.StdEncoding.EncodeToString(r.LeafHash), r.LineHash)
			for i, h := range r.Hashes {
				fmt.Fprintf(w, "proof %d: %s\n", i, base64.StdEncoding.EncodeToString(h))
			}
			fmt.Fprintf(w, "checkpoint:\n%s", r.Checkpoint)
			return nil
		},
	}
	cmd.Flags().Uint64Var(&size, "size", 0, "prove it in the tree of the first `N` entries (default: all)")
	return cmd
}

func (a localAPI) ReceiptsProve(_ context.Context, req api.ReceiptsProveRequest) (*api.ReceiptsProveResult, error) {
	if req.Seq == 0 {
		return nil, &usageError{msg: "receipts prove: sequence numbers start at 1"}
	}
	sj, err := openSigningJournal(a.f)
	if err != nil {
		return nil, err
	}
	defer sj.journal.Close()
	// One pass: the tree's leaves, and the line that holds the receipt.
	t := &receipts.Tree{}
	index, lineHash := int64(-1), ""
	err = receipts.Scan(sj.journal, func(l receipts.Line) error {
		if l.Torn {
			return nil
		}
		h := l.Hash
		if l.Long == 0 {
			h = receipts.LineHash(l.Bytes)
		}
		if index < 0 {
			if _, r, err := receipts.DecodeLine(l); err == nil && r.Seq == req.Seq {
				index, lineHash = int64(t.Size()), h
			}
		}
		return t.AppendLineHash(h)
	})
	if err != nil {
		return nil, err
	}
	if index < 0 {
		return nil, &dataError{err: fmt.Errorf("no receipt %d in the journal", req.Seq)}
	}
	size := req.Size
	if size == 0 {
		size = t.Size()
	}
	if uint64(index) >= size {
		return nil, &usageError{msg: fmt.Sprintf("receipt %d is entry %d, not within the first %d", req.Seq, index+1, size)}
	}
	if size > t.Size() {
		return nil, &usageError{msg: fmt.Sprintf("--size %d: the journal holds %d entries", size, t.Size())}
	}
	hashes, err := t.InclusionProof(uint64(index), size)
	if err != nil {
		return nil, err
	}
	root, err := t.Root(size)
	if err != nil {
		return nil, err
	}
	origin := receipts.NoteOrigin(runner.JournalHost(sj.cfg.Host))
	note, err := receipts.SignNoteCheckpoint(sj.key, origin, t, size)
	if err != nil {
		return nil, err
	}
	return &api.ReceiptsProveResult{Origin: origin, Seq: req.Seq, LeafIndex: uint64(index), TreeSize: size, RootHash: root,
		LineHash: lineHash, LeafHash: t.LeafHash(uint64(index)), Hashes: nonNil(hashes), Checkpoint: string(note)}, nil
}

func (a serviceAPI) ReceiptsProve(ctx context.Context, req api.ReceiptsProveRequest) (*api.ReceiptsProveResult, error) {
	var r api.ReceiptsProveResult
	if err := a.call(ctx, "receipts-prove", req, &r); err != nil {
		return nil, err
	}
	// What the client prints, it checks: the proof against the root it
	// states (the note's signature is the verifier's to check, with the
	// runner key it trusts).
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, r.LeafIndex, r.TreeSize, r.LeafHash, r.Hashes, r.RootHash); err != nil {
		return nil, errors.New("the runner service's inclusion proof does not verify: " + err.Error())
	}
	return &r, nil
}
