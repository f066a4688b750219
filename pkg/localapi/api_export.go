package localapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/tlogwitness"
	"github.com/prod-write/prod-write/receipts"
)

// ReceiptsExport signs with the runner key where it is: in the service
// (f.runnerIdentity) for its clients, or in this process.
func (a API) ReceiptsExport(ctx context.Context, req api.ReceiptsExportRequest) (*api.ReceiptsExportResult, error) {
	if !req.InToto {
		return nil, &UsageError{Msg: "export needs a format: --in-toto"}
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
	var at []byte
	if req.Witnessed {
		if !req.Proofs {
			return nil, &UsageError{Msg: "--witnessed goes with --proofs: it names the checkpoint the proofs are against"}
		}
		states, err := WitnessStore(sj.cfg).Load()
		if err != nil {
			return nil, fmt.Errorf("the witnesses' state: %w", err)
		}
		if at = WitnessedNote(states); at == nil {
			return nil, &DataError{Err: errors.New("no checkpoint the witnesses cosigned is kept: send one first (prod-write receipts checkpoint --witness)")}
		}
	}
	var n, left int
	if req.Proofs {
		origin := receipts.NoteOrigin(runner.JournalHost(sj.cfg.Host))
		n, left, err = receipts.ExportInTotoBundlesAt(ctx, sj.journal, sj.policy, sj.key, origin, at, out)
	} else {
		n, err = receipts.ExportInToto(ctx, sj.journal, sj.policy, sj.key, out)
	}
	var ue *receipts.UnverifiedError
	if errors.As(err, &ue) {
		return nil, &DataError{Err: fmt.Errorf("export stopped after %d runs: %w", n, err)}
	}
	var nj *receipts.CheckpointNotOfJournalError
	if errors.As(err, &nj) {
		// The witnesses cosigned a tree this journal no longer is.
		return nil, &DataError{Err: fmt.Errorf("the witnessed checkpoint: %w", err)}
	}
	if err != nil {
		return nil, err
	}
	return &api.ReceiptsExportResult{Runs: n, Signer: sj.key.Public().String(), Left: left}, nil
}

// WitnessedNote is the checkpoint note the most witnesses of states last
// cosigned (of those, the largest tree), with every cosignature states
// keep of it; nil when none cosigned anything.
func WitnessedNote(states map[string]tlogwitness.State) []byte {
	type cand struct {
		note  string
		count int
		size  uint64
	}
	by := map[string]*cand{}
	var best *cand
	for _, st := range states {
		if st.Cosignature == "" || st.Cosigned == "" {
			continue
		}
		body, _, _ := strings.Cut(st.Cosigned, "\n\n")
		c := by[body]
		if c == nil {
			c = &cand{note: st.Cosigned, size: noteSize(body)}
			by[body] = c
		}
		c.count++
		if best == nil || c.count > best.count || c.count == best.count && (c.size > best.size || c.size == best.size && c.note < best.note) {
			best = c
		}
	}
	if best == nil {
		return nil
	}
	return tlogwitness.Cosigned([]byte(best.note), states)
}

// noteSize is the tree size a checkpoint body's second line gives, or 0.
func noteSize(body string) uint64 {
	lines := strings.SplitN(body, "\n", 3)
	if len(lines) < 2 {
		return 0
	}
	n, _ := strconv.ParseUint(lines[1], 10, 64)
	return n
}
