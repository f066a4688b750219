package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/receipts"
)

// ExportOptions are `receipts export`'s inputs.
type ExportOptions struct {
	F      *Factory
	InToto bool
	Out    string
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
			return receiptsExport(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.InToto, "in-toto", false, "write in-toto Statements v1 in DSSE envelopes (the one format there is)")
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
	if _, err := a.ReceiptsExport(ctx, api.ReceiptsExportRequest{InToto: o.InToto, Out: out}); err != nil {
		return err
	}
	if o.Out != "" {
		return os.WriteFile(o.Out, buf.Bytes(), 0o644)
	}
	return nil
}

// ReceiptsExport signs with the runner key where it is: in the service
// (f.runnerIdentity) for its clients, or in this process.
func (a localAPI) ReceiptsExport(ctx context.Context, req api.ReceiptsExportRequest) (*api.ReceiptsExportResult, error) {
	if !req.InToto {
		return nil, &usageError{msg: "export needs a format: --in-toto"}
	}
	if !a.f.mayReadPlans() {
		// Each attestation carries the plan's argv, cwd and evidence
		// (docs/adr/0036-the-service-never-waits-on-a-caller.md).
		return nil, refusal.New(refusal.PrincipalUnknown, "receipts export shows what plans bind, and the caller handed over no key of the trust policy").Needs("--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml")
	}
	sj, err := openSigningJournal(a.f)
	if err != nil {
		return nil, err
	}
	defer sj.journal.Close()
	out := req.Out
	if out == nil {
		out = io.Discard
	}
	n, err := receipts.ExportInToto(ctx, sj.journal, sj.policy, sj.key, out)
	var ue *receipts.UnverifiedError
	if errors.As(err, &ue) {
		return nil, &dataError{err: fmt.Errorf("export stopped after %d runs: %w", n, err)}
	}
	if err != nil {
		return nil, err
	}
	return &api.ReceiptsExportResult{Runs: n}, nil
}

// ReceiptsExport through the service: the envelopes come over the call's
// socket as its output, and are written to req.Out here.
func (a serviceAPI) ReceiptsExport(ctx context.Context, req api.ReceiptsExportRequest) (*api.ReceiptsExportResult, error) {
	g := *a.f
	g.IO = &IOStreams{Out: req.Out, Err: a.f.IO.Err, ErrTTY: a.f.IO.ErrTTY}
	if g.IO.Out == nil {
		g.IO.Out = io.Discard
	}
	var r api.ReceiptsExportResult
	if err := (serviceAPI{f: &g}).call(ctx, "receipts-export", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
