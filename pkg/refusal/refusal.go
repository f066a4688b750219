// Package refusal holds the typed "no" that every gate in prod-write returns
// (docs/DESIGN.md §3). A refusal is not a failure: the command never ran. It carries a
// stable code, what was refused and what is missing, and never a secret
// value or a protected payload.
package refusal

import (
	"errors"
	"fmt"
)

// Code is a stable, documented refusal code.
type Code string

// The refusal codes of docs/DESIGN.md §3.
const (
	OperationAbsent     Code = "operation_absent"
	TargetNotAllowed    Code = "target_not_allowed"
	ParamInvalid        Code = "param_invalid"
	FingerprintMismatch Code = "fingerprint_mismatch"
	NoApproval          Code = "no_approval"
	Vetoed              Code = "vetoed"
	SelfApproval        Code = "self_approval"
	EvidenceExpired     Code = "evidence_expired"
	EvidenceConsumed    Code = "evidence_consumed"
	SignatureInvalid    Code = "signature_invalid"
	PrincipalUnknown    Code = "principal_unknown"
	RoleMissing         Code = "role_missing"
	InsecurePermissions Code = "insecure_permissions"
	PlanAbsent          Code = "plan_absent"
	Withdrawn           Code = "withdrawn"
	PolicyPinMismatch   Code = "policy_pin_mismatch"
	StoreUnavailable    Code = "store_unavailable"
	// EvidenceUnreadable: a piece of evidence for the plan cannot be read,
	// decoded or verified. The gate refuses rather than drop it: a corrupt
	// veto must never silently stop counting (docs/DESIGN.md §3).
	EvidenceUnreadable Code = "evidence_unreadable"
	// RunAsRefused: under the runner service, the operation's run_as is
	// missing, unknown, the caller's or the service's own account, or root
	// without allow_root (docs/adr/0011-runner-service.md).
	RunAsRefused Code = "run_as_refused"
	// OperationUnavailable: the operation is in the shared registry but
	// its program does not resolve on this host (docs/DISTRIBUTED.md).
	OperationUnavailable Code = "operation_unavailable"
	// Frozen: a freeze of the trust policy covers the operation now and
	// no principal with the freeze role granted the plan through it
	// (docs/adr/0021-freezes.md).
	Frozen Code = "frozen"
	// PreconditionChanged: the operation's precondition check, run again
	// before anything is consumed, does not give the output the plan
	// binds, or could not run (docs/adr/0025-preconditions.md).
	PreconditionChanged Code = "precondition_changed"
	// BreakGlassUnreviewed: the principal breaking glass did so before
	// and no reviewer has reviewed that run yet
	// (docs/adr/0028-break-glass.md).
	BreakGlassUnreviewed Code = "break_glass_unreviewed"
)

// Error is a refusal. Callers branch on it with errors.As.
type Error struct {
	Code        Code     `json:"code"`
	Reason      string   `json:"reason"`
	Operation   string   `json:"operation,omitempty"`
	Fingerprint string   `json:"fingerprint,omitempty"`
	Missing     []string `json:"missing"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("refused (%s): %s", e.Code, e.Reason)
}

// New returns a refusal with a reason built like fmt.Sprintf.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Reason: fmt.Sprintf(format, args...), Missing: []string{}}
}

// For fills in the operation and fingerprint and returns e.
func (e *Error) For(operation, fingerprint string) *Error {
	if e.Operation == "" {
		e.Operation = operation
	}
	if e.Fingerprint == "" {
		e.Fingerprint = fingerprint
	}
	return e
}

// Needs appends to what is missing and returns e.
func (e *Error) Needs(missing ...string) *Error {
	e.Missing = append(e.Missing, missing...)
	return e
}

// As returns the refusal in err's chain, if any.
func As(err error) (*Error, bool) {
	var r *Error
	ok := errors.As(err, &r)
	return r, ok
}

// Is reports whether err is a refusal with the given code.
func Is(err error, code Code) bool {
	r, ok := As(err)
	return ok && r.Code == code
}
