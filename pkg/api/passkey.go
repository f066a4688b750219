package api

import (
	"encoding/json"
	"time"

	"github.com/prod-write/prod-write/approval"
)

// PasskeyCodeRequest asks for a one-time code that authorises one passkey
// enrolment of Principal within TTL (0: 15m; at most 24h). Only the
// service's operator (root or the service's own account) is answered
// (docs/adr/0043-passkey-assertions-as-evidence.md).
type PasskeyCodeRequest struct {
	Principal string        `json:"principal"`
	TTL       time.Duration `json:"ttl,omitempty"`
}

// PasskeyCodeResult is the code, the one place it is ever shown: only its
// hash is kept.
type PasskeyCodeResult struct {
	FormatVersion int       `json:"format_version"`
	Principal     string    `json:"principal"`
	Code          string    `json:"code"`
	Expires       time.Time `json:"expires"`
}

// PasskeyEnrollBeginRequest begins a passkey enrolment: of the principal
// of the caller's key (a signed enrolment request), or, with Code, of
// the principal an operator issued the one-time code for (spending it).
type PasskeyEnrollBeginRequest struct {
	Code string `json:"code,omitempty"`
	// Page asks for an enrolment on the approval page: refused, before a
	// code is spent or a session kept, when the deployment serves none.
	Page bool `json:"page,omitempty"`
}

// PasskeyEnrollBeginResult is the enrolment begun: the WebAuthn
// credential creation options (with the service's challenge) that the
// approval page hands to navigator.credentials.create, and until when the
// service awaits the answer.
type PasskeyEnrollBeginResult struct {
	FormatVersion int             `json:"format_version"`
	Principal     string          `json:"principal"`
	Authorised    string          `json:"authorised"` // "key" or "code"
	Expires       time.Time       `json:"expires"`
	Options       json.RawMessage `json:"options"`
	// Page is the approval page's link that runs this ceremony in a
	// browser, with Options in its fragment, which no browser sends to a
	// server (approvalpage.EnrollURL); "" when the deployment serves no
	// page (docs/adr/0051-enrolment-on-the-approval-page.md).
	Page string `json:"page,omitempty"`
}

// PasskeyEnrollFinishRequest is the registration response: the JSON of
// the PublicKeyCredential navigator.credentials.create returned.
type PasskeyEnrollFinishRequest struct {
	Response json.RawMessage `json:"response"`
}

// PasskeyEnrollFinishResult is the credential enrolled, as root adds it
// to trust.toml under the principal (Snippet); nothing is written to the
// policy.
type PasskeyEnrollFinishResult struct {
	FormatVersion    int       `json:"format_version"`
	Principal        string    `json:"principal"`
	Authorised       string    `json:"authorised"`
	Credential       string    `json:"credential"`
	PublicKey        string    `json:"public_key"`
	UserVerification string    `json:"user_verification"`
	Enrolled         time.Time `json:"enrolled"`
	Snippet          string    `json:"snippet"`
}

// PasskeyChallengeRequest asks the service for the statement an
// approver's passkey is to sign on the approval page: Decision (approve or
// deny) of the certainty record Record of the plan Fingerprint
// (docs/adr/0048-approval-page.md). Only a caller whose key is of a
// principal with role bridge (the page's server) is answered.
type PasskeyChallengeRequest struct {
	Fingerprint string `json:"fingerprint"`
	Decision    string `json:"decision"`
	Record      string `json:"record,omitempty"`
}

// PasskeyChallengeResult is the version 2 statement the service issued,
// with its nonce (single use, remembered until Expires) and the WebAuthn
// challenge computed from it (approval.PasskeyChallenge).
type PasskeyChallengeResult struct {
	FormatVersion int       `json:"format_version"`
	Fingerprint   string    `json:"fingerprint"`
	Decision      string    `json:"decision"`
	Record        string    `json:"record,omitempty"`
	Version       int       `json:"version"`
	Nonce         []byte    `json:"nonce"`
	Issued        time.Time `json:"issued"`
	Expires       time.Time `json:"expires"`
	Challenge     []byte    `json:"challenge"`
}

// PasskeyAttestedRequest is a passkey decision (approval.TypePasskey: the
// statement's fields, the raw assertion and the approver) that the
// approval page's server signed with its bridge key.
type PasskeyAttestedRequest struct {
	Envelope *approval.Envelope `json:"envelope"`
}

// PasskeyAttestedResult is the passkey decision stored: its record id,
// whose, which credential signed it and whether the user was verified.
type PasskeyAttestedResult struct {
	FormatVersion int    `json:"format_version"`
	ID            string `json:"id"`
	Fingerprint   string `json:"fingerprint"`
	Approver      string `json:"approver"`
	Decision      string `json:"decision"`
	Credential    string `json:"credential"`
	UserVerified  bool   `json:"user_verified"`
}
