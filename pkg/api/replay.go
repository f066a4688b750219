package api

import "github.com/prod-write/prod-write/receipts"

// ReplayRequest asks the service to replay its own journal by its own
// trust policy, registry and history: a caller may ask for the verdict,
// never name what is read (the caller's own files it replays itself).
type ReplayRequest struct {
	// Each hears each entry's verdict as it is reached, in journal order.
	// Not sent: through the service the verdicts come over the call's own
	// socket as JSON Lines, each a receipts.Result, before the result.
	Each func(receipts.Result) `json:"-"`
}

// ReplayResult is the summary of a replay; a journal that does not verify
// is a result whose Summary is not OK, not an error.
type ReplayResult struct {
	Summary receipts.Summary `json:"summary"`
	// Note, for a journal with no entry, says so.
	Note string `json:"note,omitempty"`
}
