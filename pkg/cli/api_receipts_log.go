package cli

import (
	"encoding/base64"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
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
				return &localapi.UsageError{Msg: fmt.Sprintf("%q is not a sequence number", args[0])}
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
				}{localapi.FormatVersion, r})
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

// newCmdReceiptsConsistency builds `receipts consistency OLD NEW`.
func newCmdReceiptsConsistency(f *Factory) *cobra.Command {
	var verify, trust string
	cmd := &cobra.Command{
		Use:   "consistency OLD NEW",
		Short: "Prove the tree of one checkpoint note a prefix of another's, or verify such a proof",
		Long: `consistency prints an RFC 6962 consistency proof that the journal's Merkle tree
of checkpoint note OLD is a prefix of that of NEW (both as receipts checkpoint
--note wrote them), computed from the journal. Both notes must verify under
the key of a runner of the trust policy, for this host's origin, and the
journal must hold both trees: a journal cut short of either, or whose first
entries are not the tree a note signs (rewritten, or a forked view: two
notes of one size with different roots), is refused (exit 77).

With --verify PROOF, it reads no journal: it verifies OLD and NEW under the
runner keys of the policy (--trust, default the configured one) and PROOF
(what consistency --json printed) as the proof between them, with
github.com/transparency-dev/merkle/proof.VerifyConsistency. Formats:
docs/adr/0044-journal-merkle-log.md.`,
		Example: "  prod-write receipts consistency old.note new.note --json > proof.json\n  prod-write receipts consistency old.note new.note --verify proof.json",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			old, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			new, err := os.ReadFile(args[1])
			if err != nil {
				return err
			}
			if verify != "" {
				return verifyConsistency(f, trust, old, new, verify)
			}
			if trust != "" {
				return &localapi.UsageError{Msg: "--trust goes with --verify: a proof is computed under the runner's own policy"}
			}
			a, err := f.api()
			if err != nil {
				return err
			}
			r, err := a.ReceiptsConsistency(cmd.Context(), api.ReceiptsConsistencyRequest{Old: string(old), New: string(new)})
			if err != nil {
				return err
			}
			if f.JSON {
				return printJSON(f.IO.Out, localapi.ConsistencyDoc{FormatVersion: localapi.FormatVersion, ReceiptsConsistencyResult: *r})
			}
			w := f.IO.Out
			fmt.Fprintf(w, "the tree of %d entries is a prefix of the tree of %d (%s)\n", r.OldSize, r.NewSize, r.Origin)
			fmt.Fprintf(w, "old root: %s\n", base64.StdEncoding.EncodeToString(r.OldRoot))
			fmt.Fprintf(w, "new root: %s\n", base64.StdEncoding.EncodeToString(r.NewRoot))
			for i, h := range r.Hashes {
				fmt.Fprintf(w, "proof %d: %s\n", i, base64.StdEncoding.EncodeToString(h))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&verify, "verify", "", "verify `PROOF` (consistency --json's output) between OLD and NEW, reading no journal")
	cmd.Flags().StringVar(&trust, "trust", "", "with --verify: the trust policy whose runner keys the notes must verify under (default: the configured one)")
	return cmd
}

// verifyConsistency is `receipts consistency --verify`: offline, in the
// caller's process.
func verifyConsistency(f *Factory, trust string, oldNote, newNote []byte, proofFile string) error {
	if trust == "" {
		c, err := f.Config()
		if err != nil {
			return err
		}
		trust = c.Trust
	}
	r, err := localapi.VerifyConsistency(api.VerifyConsistencyRequest{Old: string(oldNote), New: string(newNote), Proof: proofFile, Trust: trust})
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, r)
	}
	fmt.Fprintf(f.IO.Out, "verified: the tree of %d entries is a prefix of the tree of %d (%s)\n", r.OldSize, r.NewSize, r.Origin)
	return nil
}
