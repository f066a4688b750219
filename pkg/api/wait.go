package api

import (
	"time"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// WaitRequest asks for a stored plan's status once its decision request is
// no longer pending: the gate opened, a veto landed, the plan was
// withdrawn, or the request expired (`status --wait`).
type WaitRequest struct {
	Fingerprint string `json:"fingerprint"`
	// Timeout bounds the wait; 0 is none. Through the runner service one
	// call waits at most 30 s (a service slot is never held long), and
	// the socket client asks again until Timeout passes.
	Timeout time.Duration `json:"timeout_ns"`
	// Progress, when set, hears each judgement that finds the request
	// still pending, from the waiting goroutine. It is not sent.
	Progress func(*StatusResult) `json:"-"`
}

// WaitResult is the status a wait ended with.
type WaitResult struct {
	Status *StatusResult `json:"status"`
	// Pending says the wait ended (its timeout passed, it was cancelled,
	// or the service it waited in stopped) with the request still
	// pending; Status is the plan's status then.
	Pending bool `json:"pending"`
}

// StillPending says whether a plan whose gate says r, and whose decision
// request is req, waits on a human: a missing, expired or spent approval,
// with its request still open. Any other refusal (reality changed,
// evidence unreadable…) no answer mends, so a wait ends on it at once.
func StillPending(r *refusal.Error, req *bridge.DecisionRequest) bool {
	if r == nil || req == nil || req.State != bridge.RequestPending {
		return false
	}
	switch r.Code {
	case refusal.NoApproval, refusal.EvidenceExpired, refusal.EvidenceConsumed:
		return true
	}
	return false
}
