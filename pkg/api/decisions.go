package api

import (
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
)

// The calls that add a principal's signed record to a stored plan: file,
// decide, gera and withdraw here, freeze grants in freeze.go, break-glass
// and its review in breakglass.go. Each signs with the caller's key (in
// the service, the key the client handed over), so a caller with no key of
// the trust policy is refused by that: by the key lookup, before anything
// of the plan but its operation and fingerprint is said.

// Written is a record a principal signed and stored, in the words status
// uses for the same record in its evidence list: `file`, `decide`,
// `gera`, `withdraw`, `freeze grant`, `break-glass` and `break-glass
// review` print it with --json (docs/JSON.md).
type Written struct {
	FormatVersion int    `json:"format_version"`
	Kind          string `json:"kind"` // approval.Kind*: record, answer, gera, withdrawal, …
	ID            string `json:"id"`
	Actor         string `json:"actor"`
	Fingerprint   string `json:"fingerprint"`
	// Verdict: record, approve or deny, go or no-go, withdraw, grant,
	// break-glass, review.
	Verdict string `json:"verdict"`
	// Record is the certainty record an answer answers, or the
	// break-glass record a review reviews.
	Record string `json:"record,omitempty"`
	// Uses is how many runs a gera go allows (0 for a no-go).
	Uses *int `json:"uses,omitempty"`
	// Freeze is the freeze a freeze grant lets the plan through.
	Freeze string `json:"freeze,omitempty"`
	// Incident is a break-glass record's incident reference; RunID the
	// break-glass run a review reviews.
	Incident string    `json:"incident,omitempty"`
	RunID    string    `json:"run_id,omitempty"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires,omitzero"`
}

// FileRequest is an operator's certainty record for the plan stored under
// Fingerprint (a whole fingerprint or a unique prefix): every text is
// required, Certainty is one of approval.CertaintyLevels. TTL (0: the
// operation's approval ttl) is how long it stands.
type FileRequest struct {
	Fingerprint string        `json:"fingerprint"`
	Summary     string        `json:"summary"`
	Effect      string        `json:"effect"`
	BlastRadius string        `json:"blast_radius"`
	Rollback    string        `json:"rollback"`
	Certainty   string        `json:"certainty"`
	TTL         time.Duration `json:"ttl,omitempty"`
}

// FileResult is the certainty record stored. Written is `file --json`'s
// document; Certainty and Plan (the plan vouched for, which the caller
// may read: it signed for it) are what the text shows besides.
type FileResult struct {
	Written
	Certainty string           `json:"certainty"`
	Plan      *operations.Plan `json:"plan"`
}

// DecideRequest is an approver's answer (approval.Approve or
// approval.Deny) to a certainty record of the plan: Record names it (""
// for the newest valid one). TTL as FileRequest's.
type DecideRequest struct {
	Fingerprint string        `json:"fingerprint"`
	Answer      string        `json:"answer"`
	Reason      string        `json:"reason,omitempty"`
	Record      string        `json:"record,omitempty"`
	TTL         time.Duration `json:"ttl,omitempty"`
}

// DecideResult is the answer stored. Written is `decide --json`'s
// document; Answered (the record answered, nil for a deny when there was
// none) and Plan are what the text shows besides.
type DecideResult struct {
	Written
	Answered *approval.CertaintyRecord `json:"answered,omitempty"`
	Plan     *operations.Plan          `json:"plan"`
}

// GeraRequest is a standing decision (approval.Go or approval.NoGo) for
// the plan: a go for Uses runs (at least 1), a no-go for none. TTL as
// FileRequest's.
type GeraRequest struct {
	Fingerprint string        `json:"fingerprint"`
	Decision    string        `json:"decision"`
	Uses        int           `json:"uses"`
	Reason      string        `json:"reason,omitempty"`
	TTL         time.Duration `json:"ttl,omitempty"`
}

// GeraResult is the decision stored: `gera --json`'s document.
type GeraResult struct {
	Written
}

// WithdrawRequest is the planner taking back its plan, for good.
type WithdrawRequest struct {
	Fingerprint string `json:"fingerprint"`
}

// WithdrawResult is the withdrawal stored: `withdraw --json`'s document.
type WithdrawResult struct {
	Written
}
