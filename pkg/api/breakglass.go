package api

import "time"

// BreakGlassRequest lets the plan stored under Fingerprint run once
// without its usual approvals, for Reason and Incident (both required),
// within TTL (0: 15m; at most the operation's break_glass_ttl)
// (docs/adr/0028-break-glass.md).
type BreakGlassRequest struct {
	Fingerprint string        `json:"fingerprint"`
	Reason      string        `json:"reason"`
	Incident    string        `json:"incident"`
	TTL         time.Duration `json:"ttl,omitempty"`
}

// BreakGlassResult is the break-glass record stored: `break-glass
// --json`'s document.
type BreakGlassResult struct {
	Written
}

// BreakGlassReviewRequest is an approver's review of the break-glass run
// Run (its run id, or a prefix of at least 6 digits), read from the
// journal of the host that answers.
type BreakGlassReviewRequest struct {
	Run   string `json:"run"`
	Notes string `json:"notes,omitempty"`
}

// BreakGlassReviewResult is the review stored and written to the journal.
// Written is `break-glass review --json`'s document; Breaker (who broke
// glass in the run) is what the text shows besides.
type BreakGlassReviewResult struct {
	Written
	Breaker string `json:"breaker"`
}
