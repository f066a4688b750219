package api

import (
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
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

// DecisionDataRequest asks for what a judgement of one stored plan reads
// of the store (bridge.Input): a bridge that is a client of the service
// judges it itself, by its policy, as its views and follow-ups need.
type DecisionDataRequest struct {
	Fingerprint string `json:"fingerprint"`
}

// DecisionDataResult is the plan's envelope, its evidence and what of it
// could not be read, the uses spent, and the break-glass history of whoever
// broke glass on it: signed records, verified by whoever judges them.
type DecisionDataResult struct {
	Input *bridge.Input `json:"input"`
}
