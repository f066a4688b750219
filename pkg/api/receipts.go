package api

import (
	"io"
	"time"

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

// ReceiptsListRequest asks for the journal's entries, unverified (replay
// verifies): all of them, or the last N. A listing comes in pages: the
// first request has no Page, each next one the Next of the result before
// it, until a result has none.
type ReceiptsListRequest struct {
	Last int               `json:"last,omitempty"`
	Page *ReceiptsListPage `json:"page,omitempty"`
}

// ReceiptsListPage is where a listing goes on: the stretch [From, To) of
// the journal that the first page fixed, and Line lines of it listed
// before From. The service takes From only at the start of a line.
type ReceiptsListPage struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
	Line int   `json:"line"`
}

// ReceiptsListResult is one page of a listing.
type ReceiptsListResult struct {
	// Empty, when set, is the sentence for a journal with no entry (and
	// then there is nothing else).
	Empty   string               `json:"empty,omitempty"`
	Entries []*ReceiptsListEntry `json:"entries"`
	// Problems are the lines that are not receipts, in order.
	Problems []ReceiptsListProblem `json:"problems,omitempty"`
	// BreakGlass, on the first page only, are the break-glass runs of the
	// whole stretch, by the line number of their intent, as replay judges
	// them; for a caller with no key of the policy without their reason
	// and incident (Redacted).
	BreakGlass map[int]*receipts.BreakGlassRun `json:"break_glass,omitempty"`
	Redacted   bool                            `json:"redacted,omitempty"`
	// Warnings are what the service could not do and the listing does
	// without (break-glass runs not marked).
	Warnings []string `json:"warnings,omitempty"`
	// Next is the page after this one, nil at the end.
	Next *ReceiptsListPage `json:"next,omitempty"`
}

// ReceiptsListEntry is one journal line read as a receipt: what names it,
// and what it says of its own run. An outcome's operation and fingerprint
// are its intent's, which the client joins from earlier entries; a
// review's Fingerprint is the plan it says it reviews.
type ReceiptsListEntry struct {
	Line        int       `json:"line"`
	Seq         uint64    `json:"seq"`
	Kind        string    `json:"kind"`
	RunID       string    `json:"run_id"`
	Time        time.Time `json:"time"`
	Runner      string    `json:"runner"`
	Operation   string    `json:"operation,omitempty"`
	Fingerprint string    `json:"fingerprint,omitempty"`
	// BreakGlassPath marks an intent on the break-glass path.
	BreakGlassPath bool `json:"break_glass_path,omitempty"`
	// ExitCode is the program's exit status, on outcomes only.
	ExitCode *int `json:"exit_code,omitempty"`
}

// ReceiptsListProblem is a line that is not a receipt.
type ReceiptsListProblem struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// ReceiptsExportRequest asks for each run of the journal restated as an
// in-toto attestation signed by the runner key (docs/FORMAT.md).
type ReceiptsExportRequest struct {
	InToto bool `json:"in_toto"`
	// Proofs writes each run as a run bundle: its attestation, inclusion
	// proofs of its receipts in the journal's Merkle tree and the tree's
	// checkpoint note (receipts.RunBundle).
	Proofs bool `json:"proofs,omitempty"`
	// Witnessed, with Proofs, proves every run against the checkpoint the
	// most witnesses cosigned (the largest of those), as the service keeps
	// it, with their cosignatures, rather than a new one of the head: a
	// gate can then ask for k of n witnesses (receipts verify-export
	// --witnesses). Runs after that checkpoint are left out (Left).
	Witnessed bool `json:"witnessed,omitempty"`
	// Out is where the envelopes go, one a line, as they are signed. Not
	// sent: through the service they come over the call's own socket, and
	// the client writes them to Out.
	Out io.Writer `json:"-"`
}

// ReceiptsExportResult is how many runs were exported, and the public
// half of the runner key that signed them, as trust.toml spells it: what
// `receipts verify-export --pub` takes.
type ReceiptsExportResult struct {
	Runs   int    `json:"runs"`
	Signer string `json:"signer"`
	// Left is how many runs Witnessed left out: they came after the
	// witnessed checkpoint.
	Left int `json:"left,omitempty"`
	// TreeSize is the size of the tree the proofs are against.
	TreeSize uint64 `json:"tree_size,omitempty"`
}

// ReceiptsCheckpointRequest asks for the journal's head signed by the
// runner key; with Note, also as a C2SP checkpoint note of the journal's
// Merkle tree (docs/adr/0044-journal-merkle-log.md).
type ReceiptsCheckpointRequest struct {
	Note bool `json:"note,omitempty"`
	// Witness, with Note, first sends the note to the configured
	// witnesses (C2SP tlog-witness) and keeps what they cosign.
	Witness bool `json:"witness,omitempty"`
}

// WitnessAnswer is what one witness made of a checkpoint sent to it.
type WitnessAnswer struct {
	Name string `json:"name"`
	// Cosigned: its cosignature verified and is kept; Size is the size
	// of the log it holds, as far as the service knows.
	Cosigned bool   `json:"cosigned"`
	Size     uint64 `json:"size"`
	Error    string `json:"error,omitempty"`
}

// ReceiptsCheckpointResult is the signed head, and what it says (the
// payload, unverified by whoever reads it here: replay verifies the
// envelope).
type ReceiptsCheckpointResult struct {
	Checkpoint receipts.Checkpoint `json:"checkpoint"`
	Envelope   *approval.Envelope  `json:"envelope"`
	// Note is the signed note, when asked for: origin, size, root,
	// with the cosignatures kept of the witnesses that cosigned it.
	Note string `json:"note,omitempty"`
	// Witnesses are the witnesses' answers, with Witness.
	Witnesses []WitnessAnswer `json:"witnesses,omitempty"`
}
