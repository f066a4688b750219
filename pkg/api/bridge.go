package api

import (
	"time"

	"github.com/prod-write/prod-write/approval"
)

// AnswerAttestedRequest is an answer a bridge authenticated on its channel
// (a Slack click, a GitHub comment or review) and signed with its bridge
// key: the channel evidence, and the envelope of the answer it signed
// (docs/adr/0045-bridges-and-doctor-as-api-clients.md). The service
// derives the approver from the evidence by its own policy, judges the
// request against its own store and clock, and stores the envelope only
// when it is exactly the answer those checks make.
type AnswerAttestedRequest struct {
	Fingerprint string           `json:"fingerprint"`
	Record      string           `json:"record"`
	Verdict     string           `json:"verdict"`
	Reason      string           `json:"reason,omitempty"`
	Channel     approval.Channel `json:"channel"`
	// Issued is the channel's own time of the click or comment.
	Issued   time.Time          `json:"issued"`
	Envelope *approval.Envelope `json:"envelope"`
}

// AnswerAttestedResult is the stored answer: its record id, the approver
// the evidence maps to, and whether this click or comment was already
// recorded (Duplicate: nothing new was stored).
type AnswerAttestedResult struct {
	ID        string `json:"id"`
	Approver  string `json:"approver"`
	Verdict   string `json:"verdict"`
	Duplicate bool   `json:"duplicate"`
}
