package api

import "time"

// FreezeGrantRequest lets the plan stored under Fingerprint pass the gate
// while the freeze Freeze (a name of the trust policy's) is in force, for
// Reason; TTL (0: the operation's approval ttl) is how long the grant
// stands. It is not an approval, and the planner cannot grant its own
// plan (docs/adr/0021-freezes.md).
type FreezeGrantRequest struct {
	Fingerprint string        `json:"fingerprint"`
	Freeze      string        `json:"freeze"`
	Reason      string        `json:"reason"`
	TTL         time.Duration `json:"ttl,omitempty"`
}

// FreezeGrantResult is the grant stored: `freeze grant --json`'s document.
type FreezeGrantResult struct {
	Written
}
