package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/receipts"
)

// ExportOptions are `receipts export`'s inputs.
type ExportOptions struct {
	F      *Factory `json:"-"`
	InToto bool     `json:"in_toto"`
	Out    string   `json:"-"`
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
nothing more is exported. Formats and test vectors: docs/FORMAT.md.`,
		Example: "  prod-write receipts export --in-toto --out runs.intoto.jsonl",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !opts.InToto {
				return &usageError{msg: "export needs a format: --in-toto"}
			}
			if runF != nil {
				return runF(opts)
			}
			var h []handover
			if opts.Out != "" {
				h = append(h, handover{name: "out", path: opts.Out, write: true})
			}
			return f.dispatch("receipts-export", opts, h, func() error { return receiptsExport(opts) })
		},
	}
	cmd.Flags().BoolVar(&opts.InToto, "in-toto", false, "write in-toto Statements v1 in DSSE envelopes (the one format there is)")
	cmd.Flags().StringVar(&opts.Out, "out", "", "write to `FILE` instead of stdout")
	return cmd
}

// receiptsExport signs with the runner key where it is: in the service
// (f.runnerIdentity), which then writes to the descriptor the client
// handed over as stdout, or in this process.
func receiptsExport(o *ExportOptions) error {
	f := o.F
	sj, err := openSigningJournal(f)
	if err != nil {
		return err
	}
	defer sj.journal.Close()
	p, k, fl := sj.policy, sj.key, sj.journal
	var w io.Writer = f.IO.Out
	var buf bytes.Buffer
	if o.Out != "" {
		w = &buf
	}
	n, err := receipts.ExportInToto(context.Background(), fl, p, k, w)
	var ue *receipts.UnverifiedError
	if errors.As(err, &ue) {
		return &dataError{err: fmt.Errorf("export stopped after %d runs: %w", n, err)}
	}
	if err != nil {
		return err
	}
	if o.Out != "" {
		return os.WriteFile(o.Out, buf.Bytes(), 0o644)
	}
	return nil
}
