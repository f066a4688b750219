package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// ExportOptions are `receipts export`'s inputs.
type ExportOptions struct {
	F         *Factory
	InToto    bool
	Proofs    bool
	Witnessed bool
	Out       string
}

// newCmdReceiptsExport builds `receipts export --in-toto`.
func newCmdReceiptsExport(f *Factory, runF func(*ExportOptions) error) *cobra.Command {
	opts := &ExportOptions{F: f}
	cmd := &cobra.Command{
		Use:   "export --in-toto",
		Short: "Restate each run of the journal as an in-toto attestation signed by the runner key",
		Long: `export --in-toto writes, one per line, a DSSE envelope for each run of the
journal: an in-toto Statement v1 whose subjects are the program and each file
parameter (name and sha256) and whose predicate (predicateType
` + receipts.RunPredicateV1 + `) carries the operation, target,
argv, cwd, the decision (path, evidence, approvers and their channels, the use
spent) and the outcome (exit status, signal, duration, output digests). It is
signed by this host's runner key, in the runner service when there is one.
Every journal entry must verify as signed by a runner of the trust policy, or
nothing more is exported. Formats and test vectors: docs/FORMAT.md.

With --proofs each line is a run bundle instead (` + receipts.RunBundleV1 + `):
the envelope, inclusion proofs of the run's intent and outcome receipts in
the journal's Merkle tree, and the tree's checkpoint, a C2SP note signed by
the runner key, so that one run verifies alone from the runner's public key
(receipts verify-export).

With --witnessed the proofs are against the checkpoint the most witnesses
cosigned (of those, the largest), as the service keeps it with their
cosignatures, instead of a new checkpoint of the head; runs after it are
left out, and counted on stderr. A gate then verifies one run alone and
asks for k of n witnesses (receipts verify-export --trust FILE --witnesses
K): a run the runner key's holder made up, with a tree and checkpoint of
its own, has no such quorum.`,
		Example: "  prod-write receipts export --in-toto --out runs.intoto.jsonl\n  prod-write receipts export --in-toto --proofs --out runs.bundles.jsonl",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !opts.InToto {
				return &localapi.UsageError{Msg: "export needs a format: --in-toto"}
			}
			if runF != nil {
				return runF(opts)
			}
			return receiptsExport(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.InToto, "in-toto", false, "write in-toto Statements v1 in DSSE envelopes (the one format there is)")
	cmd.Flags().BoolVar(&opts.Proofs, "proofs", false, "write run bundles: each attestation with inclusion proofs of its receipts and the signed checkpoint of the tree")
	cmd.Flags().BoolVar(&opts.Witnessed, "witnessed", false, "with --proofs, prove against the checkpoint the witnesses cosigned (receipts checkpoint --witness), cosignatures kept, leaving out the runs after it")
	cmd.Flags().StringVar(&opts.Out, "out", "", "write to `FILE` instead of stdout")
	return cmd
}

// receiptsExport is receipts export through the API this caller reaches:
// to stdout as the envelopes come, or to --out, written here, as the
// caller, once every run is exported.
func receiptsExport(ctx context.Context, o *ExportOptions) error {
	a, err := o.F.api()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	out := o.F.IO.Out
	if o.Out != "" {
		out = &buf
	}
	r, err := a.ReceiptsExport(ctx, api.ReceiptsExportRequest{InToto: o.InToto, Proofs: o.Proofs, Witnessed: o.Witnessed, Out: out})
	if err != nil {
		return err
	}
	file := "FILE"
	if o.Out != "" {
		if err := os.WriteFile(o.Out, buf.Bytes(), 0o644); err != nil {
			return err
		}
		file = o.Out
	}
	// Nobody should have to guess how: the command, with the
	// key that signed, on stderr, away from the envelopes.
	if r.Left > 0 {
		fmt.Fprintf(o.F.IO.Err, "prod-write: %d runs after the witnessed checkpoint left out: send one of the head (prod-write receipts checkpoint --witness) and export again\n", r.Left)
	}
	if r.Runs > 0 && r.Signer != "" {
		cmd := verifyExportCommand(file, r.Signer)
		if o.Witnessed {
			cmd += " --trust trust.toml --witnesses K"
		}
		fmt.Fprintf(o.F.IO.Err, "prod-write: %d runs exported; verify them with: %s\n", r.Runs, cmd)
	}
	return nil
}

// verifyExportCommand is the command that verifies an export at file
// under the runner's public key signer.
func verifyExportCommand(file, signer string) string {
	return strings.Join([]string{"prod-write", "receipts", "verify-export", localapi.ShellQuote(file), "--pub", localapi.ShellQuote(signer)}, " ")
}

// VerifyExportOptions are `receipts verify-export`'s inputs.
type VerifyExportOptions struct {
	F             *Factory
	Export        string
	Pub           string
	Trust         string
	Witnesses     int
	WitnessMaxAge time.Duration
}

// newCmdReceiptsVerifyExport builds `receipts verify-export`.
func newCmdReceiptsVerifyExport(f *Factory, runF func(*VerifyExportOptions) error) *cobra.Command {
	opts := &VerifyExportOptions{F: f}
	cmd := &cobra.Command{
		Use:   "verify-export FILE --pub KEY",
		Short: "Verify the in-toto attestations receipts export wrote, under the runner's public key",
		Long: `verify-export checks each line of what receipts export --in-toto wrote,
exactly: a DSSE envelope of payload type ` + receipts.InTotoPayloadType + ` with
one signature, by KEY, over its PAE; an in-toto Statement v1 of predicate type
` + receipts.RunPredicateV1 + ` that decodes
strictly; at least one subject, each with only a sha256 digest; and no run
attested twice. It reads nothing but FILE and KEY: it runs where the
journal, the store and the trust policy are not. receipts export prints the
command that verifies what it wrote.

KEY is the runner's public key as trust.toml spells it (ed25519:BASE64), or a
file holding that line or a PKIX PEM public key (key public --pem).

With --witnesses K (and --trust FILE, whose [[witness]] keys count) every
line must be a run bundle whose checkpoint K distinct witnesses cosign
(C2SP tlog-cosignature), besides the runner: export with --proofs
--witnessed. --witness-max-age D counts only cosignatures made within D of
now.

Exit 0 when every line verifies, 77 when one does not (the line and the
reason are printed), 65 when FILE or KEY is malformed, 74 when a file cannot
be read.`,
		Example: "  prod-write receipts verify-export runs.intoto.jsonl --pub ed25519:BASE64",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Export = args[0]
			if opts.Pub == "" {
				return &localapi.UsageError{Msg: "verify-export needs --pub: the runner's public key (receipts export prints it)"}
			}
			if runF != nil {
				return runF(opts)
			}
			return verifyExportRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Pub, "pub", "", "the runner's public `KEY`: ed25519:BASE64, or a file holding it or a PEM public key")
	cmd.Flags().StringVar(&opts.Trust, "trust", "", "the trust policy `FILE` whose [[witness]] keys --witnesses counts")
	cmd.Flags().IntVar(&opts.Witnesses, "witnesses", 0, "refuse a bundle whose checkpoint fewer than `K` witnesses of --trust cosign")
	cmd.Flags().DurationVar(&opts.WitnessMaxAge, "witness-max-age", 0, "count only the cosignatures a witness made within `D` of now")
	return cmd
}

func verifyExportRun(o *VerifyExportOptions) error {
	v, err := localapi.VerifyExport(api.VerifyExportRequest{Export: o.Export, Pub: o.Pub, Trust: o.Trust, Witnesses: o.Witnesses, WitnessMaxAge: o.WitnessMaxAge})
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printDoc(o.F.IO.Out, map[string]any{"export": v.Export, "verified": v.Verified, "runs": v.Runs, "proved": v.Proved, "tree_size": v.TreeSize, "key_id": v.KeyID, "witnessed": v.Witnessed})
	}
	fmt.Fprintf(o.F.IO.Out, "%s: verified: %d runs attested, each signed by key %.12s…\n", v.Export, v.Runs, v.KeyID)
	if v.Proved > 0 {
		fmt.Fprintf(o.F.IO.Out, "%s: %d of them with their receipts proved in the journal's tree of %d entries, its checkpoint signed by the same key\n", v.Export, v.Proved, v.TreeSize)
	}
	if v.Witnessed > 0 {
		fmt.Fprintf(o.F.IO.Out, "%s: each checkpoint cosigned by at least %d witnesses of %s\n", v.Export, v.Witnessed, o.Trust)
	}
	return nil
}
