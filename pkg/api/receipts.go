package api

import (
	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/receipts"
)

// ReceiptsShowRequest names the journal entries to show: one run, by its
// id or a prefix of at least 6 characters, or one entry, by its sequence
// number (digits only).
type ReceiptsShowRequest struct {
	ID string `json:"id"`
}

// ReceiptsShowResult is the entries found, oldest first.
type ReceiptsShowResult struct {
	Entries []*ReceiptEntry `json:"entries"`
}

// ReceiptEntry is one journal entry as `receipts show` prints it
// (docs/JSON.md): the receipt as signed, the document's format_version,
// and for an intent why it was allowed (derived, not signed).
//
// For a caller with no key of the trust policy the service answers it
// Redacted (receipts.Redacted, docs/adr/0040-what-a-keyless-caller-reads-of-a-receipt.md):
// nothing the plan binds nor what its evidence says, no Explanation, and
// the plan's Target, which the removed plan held.
type ReceiptEntry struct {
	FormatVersion int `json:"format_version"`
	*receipts.Receipt
	Explanation *approval.Explanation `json:"explanation,omitempty"`
	Redacted    bool                  `json:"redacted,omitempty"`
	Target      string                `json:"target,omitempty"`
}

// RedactedEntry is e as a caller with no key of the trust policy reads it.
func RedactedEntry(e *ReceiptEntry) *ReceiptEntry {
	return &ReceiptEntry{FormatVersion: e.FormatVersion, Receipt: receipts.Redacted(e.Receipt), Redacted: true, Target: receipts.PlanTarget(e.Receipt)}
}
