package api

import (
	"time"

	"github.com/prod-write/prod-write/receipts"
)

// ReplayRequest is a replay: of the configured journal by the configured
// trust policy, registry and history when every option is empty, or of the
// files and archive its options name, by the policy they name.
//
// The runner service answers only the first: it replays its own journal,
// and a caller may ask for the verdict, never name what the service reads.
// A request with any option is refused there (HasOptions); the CLI makes it
// in the caller's own process, with the caller's rights, as replay needs no
// privilege.
type ReplayRequest struct {
	// Path is a journal file, or an S3 archive (s3://BUCKET/PREFIX: one
	// host's chain, or the parent of several, replayed as a fleet).
	Path     string `json:"path,omitempty"`
	Trust    string `json:"trust,omitempty"`
	Registry string `json:"registry,omitempty"`
	History  string `json:"history,omitempty"`
	// Rollout is how long a replaced version of the policy or an
	// operation still counts after the commit that replaced it, when the
	// history is the trust policy's git branch (0: receipts.DefaultRollout).
	Rollout time.Duration `json:"rollout,omitempty"`
	// Host is the host whose journal Path is: every receipt and the
	// checkpoint must name it.
	Host string `json:"host,omitempty"`
	// Checkpoint is a file receipts checkpoint wrote (a DSSE checkpoint or
	// a checkpoint note): a signed head the journal must still reach.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Witnesses is how many distinct witnesses of the trust policy must
	// cosign the checkpoint note, each within WitnessMaxAge of now when
	// that is set (ADR 0044).
	Witnesses     int           `json:"witnesses,omitempty"`
	WitnessMaxAge time.Duration `json:"witness_max_age,omitempty"`
	// HostCheckpoints are checkpoint note files of hosts of an archive
	// replayed as a fleet: each host's chain must reach its own.
	HostCheckpoints []string `json:"host_checkpoints,omitempty"`
	// StrictRevocation fails runs that relied on a principal revoked
	// since; FailUnreviewedBreakGlass fails break-glass runs no other
	// approver reviewed. Without them both are reported.
	StrictRevocation         bool `json:"strict_revocation,omitempty"`
	FailUnreviewedBreakGlass bool `json:"fail_unreviewed_break_glass,omitempty"`
	// Policy and PolicyRegistry are a proposed trust policy and registry
	// to audit the journal against, reporting without failing (ADR 0022).
	Policy         string `json:"policy,omitempty"`
	PolicyRegistry string `json:"policy_registry,omitempty"`
	// State and StateKey: resume from the replay state in the file State,
	// sealed by StateKey (a key CI holds), and seal the state at the head
	// there when no entry fails (ADR 0044).
	State    string `json:"state,omitempty"`
	StateKey string `json:"state_key,omitempty"`
	// VSA and VSAKey: write a SLSA verification summary of the verdict,
	// signed by VSAKey, to the file VSA (docs/FORMAT.md §5).
	VSA    string `json:"vsa,omitempty"`
	VSAKey string `json:"vsa_key,omitempty"`

	// Each hears each verdict as it is reached, in journal order (for a
	// fleet, host after host, then the fleet's own). Not sent: through
	// the service the verdicts come over the call's own socket as JSON
	// Lines, each a ReplayVerdict, before the result.
	Each func(ReplayVerdict) `json:"-"`
}

// HasOptions reports whether r names anything to read or write: then it is
// replayed in the caller's process, never by the service.
func (r ReplayRequest) HasOptions() bool {
	return r.Path != "" || r.Trust != "" || r.Registry != "" || r.History != "" || r.Rollout != 0 || r.Host != "" ||
		r.Checkpoint != "" || r.Witnesses != 0 || r.WitnessMaxAge != 0 || len(r.HostCheckpoints) > 0 ||
		r.StrictRevocation || r.FailUnreviewedBreakGlass || r.Policy != "" || r.PolicyRegistry != "" ||
		r.State != "" || r.StateKey != "" || r.VSA != "" || r.VSAKey != ""
}

// ReplayVerdict is one verdict of a replay: an entry's, with the host whose
// chain holds it when an archive holds several; or the fleet's own (Host
// "fleet"), such as a record spent across hosts, with every spend.
type ReplayVerdict struct {
	Host string `json:"host,omitempty"`
	receipts.Result
	Spends []receipts.Spend `json:"spends,omitempty"`
}

// HostSummary is one host's part of a fleet replay.
type HostSummary struct {
	Host string `json:"host"`
	receipts.Summary
}

// ReplayResult is the summary of a replay; a journal that does not verify
// is a result whose Summary is not OK, not an error.
type ReplayResult struct {
	// Summary is the journal's, or the fleet's: its hosts' together, with
	// the fleet's own failures.
	Summary receipts.Summary `json:"summary"`
	// Hosts, for an archive of more than one host, are each host's.
	Hosts []HostSummary `json:"hosts,omitempty"`
	// Note, for a journal with no entry, says so.
	Note string `json:"note,omitempty"`
	// Audit is set when a proposed policy or registry was audited.
	Audit bool `json:"audit,omitempty"`
	// VSAVerify is the command that verifies the VSA written.
	VSAVerify string `json:"vsa_verify,omitempty"`
	// StateResumed says the replay resumed from its state, which stood
	// on StateFrom entries: those were not verified again. StateRejudged
	// says a state was set aside because another policy, history or
	// options judged it, and StateOutdated because an earlier version of
	// replay wrote it (receipts.StateVersion): either way the journal was
	// replayed in full, and the state written again.
	StateResumed  bool   `json:"state_resumed,omitempty"`
	StateFrom     uint64 `json:"state_from,omitempty"`
	StateRejudged bool   `json:"state_rejudged,omitempty"`
	StateOutdated bool   `json:"state_outdated,omitempty"`
}
