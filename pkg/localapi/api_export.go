package localapi

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/receipts"
)

// ReceiptsExport signs with the runner key where it is: in the service
// (f.runnerIdentity) for its clients, or in this process.
func (a API) ReceiptsExport(ctx context.Context, req api.ReceiptsExportRequest) (*api.ReceiptsExportResult, error) {
	if !req.InToto {
		return nil, &UsageError{Msg: "export needs a format: --in-toto"}
	}
	if !a.Env.MayReadPlans() {
		// Each attestation carries the plan's argv, cwd and evidence
		// (docs/adr/0036-the-service-never-waits-on-a-caller.md).
		return nil, refusal.New(refusal.PrincipalUnknown, "receipts export shows what plans bind, and the caller handed over no key of the trust policy").Needs("--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml")
	}
	sj, err := openSigningJournal(a.Env)
	if err != nil {
		return nil, err
	}
	defer sj.journal.Close()
	out := req.Out
	if out == nil {
		out = io.Discard
	}
	var n int
	if req.Proofs {
		origin := receipts.NoteOrigin(runner.JournalHost(sj.cfg.Host))
		n, err = receipts.ExportInTotoBundles(ctx, sj.journal, sj.policy, sj.key, origin, out)
	} else {
		n, err = receipts.ExportInToto(ctx, sj.journal, sj.policy, sj.key, out)
	}
	var ue *receipts.UnverifiedError
	if errors.As(err, &ue) {
		return nil, &DataError{Err: fmt.Errorf("export stopped after %d runs: %w", n, err)}
	}
	if err != nil {
		return nil, err
	}
	return &api.ReceiptsExportResult{Runs: n, Signer: sj.key.Public().String()}, nil
}
