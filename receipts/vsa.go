package receipts

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// A VSA is replay's verdict on a journal head as a SLSA Verification
// Summary Attestation, in a DSSE envelope signed by a key given to CI
// (docs/REPLAY.md, "A verification summary for later jobs"). `replay
// --vsa` writes one; [ParseVSA] and [VSA.Verify] check one exactly, so
// that a later job need not guess what its subject is.
const (
	// VSAPredicateV1 is the SLSA VSA's predicateType.
	VSAPredicateV1 = "https://slsa.dev/verification_summary/v1"
	// VSAVerifierID names replay as the verifier of a VSA.
	VSAVerifierID = "https://github.com/prod-write/prod-write/replay"
	// vsaEntries ends a VSA's resourceUri: the number of entries replayed.
	vsaEntries = "#entries="
)

// VSAPredicate is the predicate of replay's VSA, field by field.
type VSAPredicate struct {
	// Verifier is replay; the attestation framework's VSA v1 bindings
	// know no verifier version, so none is given.
	Verifier struct {
		ID string `json:"id"`
	} `json:"verifier"`
	TimeVerified       string    `json:"timeVerified"`
	ResourceURI        string    `json:"resourceUri"`
	Policy             VSAPolicy `json:"policy"`
	VerificationResult string    `json:"verificationResult"`
	VerifiedLevels     []string  `json:"verifiedLevels"`
	SlsaVersion        string    `json:"slsaVersion"`
	// DependencyLevels is required by the VSA; a journal has no
	// dependencies.
	DependencyLevels map[string]uint64 `json:"dependencyLevels"`
}

// VSAPolicy is the trust policy a VSA's verdict was reached against.
type VSAPolicy struct {
	URI    string            `json:"uri"`
	Digest map[string]string `json:"digest"`
}

// VSA is a parsed, not yet verified, VSA envelope.
type VSA struct {
	Envelope  *dsse.Envelope
	Statement VSAStatement
}

// VSAStatement is the in-toto Statement v1 a VSA envelope carries.
type VSAStatement struct {
	Type          string       `json:"_type"`
	Subject       []Subject    `json:"subject"`
	PredicateType string       `json:"predicateType"`
	Predicate     VSAPredicate `json:"predicate"`
}

// MalformedVSAError is returned by [ParseVSA] for bytes that are not a
// VSA envelope at all: not a strict DSSE envelope, a payload that is not
// base64, or a statement that does not decode as replay's VSA.
type MalformedVSAError struct {
	Msg string
	Err error
}

func (e *MalformedVSAError) Error() string {
	if e.Err == nil {
		return "not a VSA: " + e.Msg
	}
	return "not a VSA: " + e.Msg + ": " + e.Err.Error()
}

func (e *MalformedVSAError) Unwrap() error { return e.Err }

// VSARefusedError is returned by [VSA.Verify], and only there, for a
// well-formed VSA that does not vouch for the journal under the key: its
// Reason says which check failed. It is never an I/O error.
type VSARefusedError struct{ Reason string }

func (e *VSARefusedError) Error() string { return "VSA refused: " + e.Reason }

func refuseVSA(format string, args ...any) error {
	return &VSARefusedError{Reason: fmt.Sprintf(format, args...)}
}

// ParseVSA reads a VSA envelope strictly (pkg/strictjson), one trailing
// newline allowed, and decodes its statement without verifying anything;
// it returns a [*MalformedVSAError] for anything else.
func ParseVSA(b []byte) (*VSA, error) {
	b, _ = bytes.CutSuffix(b, []byte("\n"))
	var env dsse.Envelope
	if err := strictjson.Unmarshal(b, &env); err != nil {
		return nil, &MalformedVSAError{Msg: "not a DSSE envelope", Err: err}
	}
	body, err := base64.StdEncoding.Strict().DecodeString(env.Payload)
	if err != nil {
		return nil, &MalformedVSAError{Msg: "payload is not base64", Err: err}
	}
	v := &VSA{Envelope: &env}
	if err := strictjson.Unmarshal(body, &v.Statement); err != nil {
		return nil, &MalformedVSAError{Msg: "payload is not a VSA statement", Err: err}
	}
	return v, nil
}

// Verify checks that v is signed by pub, over the DSSE pre-authentication
// encoding of its payload, and says that replay verified, PASSED, the
// journal whose head (the hex sha256 of its last line, [Summary].Head)
// and number of entries are given. It returns a [*VSARefusedError] naming
// the first check that fails. The journal's path in resourceUri and the
// policy are not compared: a later job reads the journal at another path,
// and the VSA names the policy it was judged by.
func (v *VSA) Verify(pub keys.Public, head string, entries int) error {
	env := v.Envelope
	if env.PayloadType != InTotoPayloadType {
		return refuseVSA("payloadType %q, want %q", env.PayloadType, InTotoPayloadType)
	}
	if len(env.Signatures) != 1 {
		return refuseVSA("%d signatures, want exactly 1", len(env.Signatures))
	}
	if err := approval.VerifyWith(pub, env); err != nil {
		return refuseVSA("the signature does not verify under key %.12s… (%s): %v", pub.ID(), pub, err)
	}
	st := &v.Statement
	if st.Type != StatementV1 {
		return refuseVSA("statement _type %q, want %q", st.Type, StatementV1)
	}
	if st.PredicateType != VSAPredicateV1 {
		return refuseVSA("predicateType %q, want %q", st.PredicateType, VSAPredicateV1)
	}
	p := &st.Predicate
	if p.Verifier.ID != VSAVerifierID {
		return refuseVSA("verifier %q, want %q", p.Verifier.ID, VSAVerifierID)
	}
	if len(st.Subject) != 1 {
		return refuseVSA("%d subjects, want exactly 1: the journal head", len(st.Subject))
	}
	if got := st.Subject[0].Digest["sha256"]; got != head {
		return refuseVSA("subject %q has sha256 %s, but the journal's last line hashes to %s: the journal is not the one replay attested", st.Subject[0].Name, orNone(got), orNone(head))
	}
	n, err := vsaEntryCount(p.ResourceURI)
	if err != nil {
		return err
	}
	if n != entries {
		return refuseVSA("resourceUri counts %d entries, the journal has %d", n, entries)
	}
	if p.VerificationResult != "PASSED" {
		return refuseVSA("verificationResult %q: replay did not pass the journal", p.VerificationResult)
	}
	return nil
}

// vsaEntryCount reads N from a resourceUri ending "#entries=N", N in
// canonical decimal.
func vsaEntryCount(uri string) (int, error) {
	i := strings.LastIndex(uri, vsaEntries)
	if i < 0 {
		return 0, refuseVSA("resourceUri %q does not end in %sN", uri, vsaEntries)
	}
	s := uri[i+len(vsaEntries):]
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, refuseVSA("resourceUri %q does not end in %sN", uri, vsaEntries)
	}
	return n, nil
}

func orNone(h string) string {
	if h == "" {
		return "(none: no entry)"
	}
	return h
}

// JournalHead reads a journal and returns what replay's [Summary] says of
// it without verifying anything: Head, the hex sha256 of its last line
// (torn or too long alike), and Entries, the number of lines. A test
// holds it to Replay's.
func JournalHead(r io.Reader) (head string, entries int, err error) {
	err = Scan(r, func(l Line) error {
		entries++
		if l.Long > 0 {
			head = l.Hash
		} else {
			head = LineHash(l.Bytes)
		}
		return nil
	})
	if err != nil {
		return "", 0, fmt.Errorf("reading the journal: %w", err)
	}
	return head, entries, nil
}
