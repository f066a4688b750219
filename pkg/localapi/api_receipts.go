package localapi

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/receipts"
)

// The receipts calls on the application API (docs/API.md): in-process,
// through the runner service, and the service's answer to each.

func (a API) ReceiptsShow(_ context.Context, req api.ReceiptsShowRequest) (*api.ReceiptsShowResult, error) {
	found, err := findReceipts(a.Env, req.ID)
	if err != nil {
		return nil, err
	}
	r := &api.ReceiptsShowResult{Entries: make([]*api.ReceiptEntry, len(found))}
	for i, rc := range found {
		// For an intent, why it was allowed (not signed:
		// derived from what is).
		r.Entries[i] = &api.ReceiptEntry{FormatVersion: FormatVersion, Receipt: rc, Explanation: receipts.Explain(rc)}
		if a.Redact {
			// What names and hashes the run, nothing the plan binds
			// (docs/adr/0040-what-a-keyless-caller-reads-of-a-receipt.md).
			r.Entries[i] = api.RedactedEntry(r.Entries[i])
		}
	}
	return r, nil
}

// findReceipts is the entries of run id (or a prefix of at least 6
// characters), or the entry of sequence number id, oldest first.
func findReceipts(f *Env, id string) ([]*receipts.Receipt, error) {
	fl, err := OpenJournal(f)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	fi, err := fl.Stat()
	if err != nil {
		return nil, err
	}
	seq, seqErr := strconv.ParseUint(id, 10, 64)
	// Read from the end, and stop as soon as nothing earlier can match:
	// a recent receipt costs what it returns, not the journal's size.
	// Sequence numbers grow along the journal; a full run id's receipts
	// all follow its intent. A shorter prefix may match several runs, so
	// it reads back to the start.
	var found []*receipts.Receipt
	err = receipts.ScanBack(fl, fi.Size(), func(l receipts.Line) bool {
		_, r, err := receipts.DecodeLine(l)
		if err != nil {
			return false
		}
		if seqErr == nil {
			// Digits only: a sequence number.
			if r.Seq == seq {
				found = append(found, r)
			}
			return r.Seq <= seq
		}
		runPrefix := len(id) >= 6 && r.RunID != "" && strings.HasPrefix(r.RunID, id)
		if runPrefix {
			found = append(found, r)
		}
		return runPrefix && r.Kind == receipts.KindIntent && len(id) == len(r.RunID)
	})
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, &DataError{Err: fmt.Errorf("no receipt %q in the journal", id)}
	}
	for i, j := 0, len(found)-1; i < j; i, j = i+1, j-1 {
		found[i], found[j] = found[j], found[i]
	}
	return found, nil
}

func (a ServiceClient) ReceiptsShow(ctx context.Context, req api.ReceiptsShowRequest) (*api.ReceiptsShowResult, error) {
	var r api.ReceiptsShowResult
	if err := callInto(ctx, a, api.CallReceiptsShow, req, nil, &r); err != nil {
		return nil, err
	}
	for _, e := range r.Entries {
		if e == nil || e.Receipt == nil {
			return nil, fmt.Errorf("the runner service's receipts show answered an entry with no receipt")
		}
	}
	return &r, nil
}
