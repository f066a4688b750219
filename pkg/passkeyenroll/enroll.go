// Package passkeyenroll enrols a principal's passkey
// (docs/adr/0043-passkey-assertions-as-evidence.md): a WebAuthn
// registration ceremony, authorised by the principal's key (a signed
// enrolment request) or by a one-time code an operator issued, verified
// with github.com/go-webauthn/webauthn. It ends with the credential's id
// and public key as a trust.toml snippet for root to add under the
// principal: enrolment writes nothing to the policy.
//
// Its state is files of the service's state directory, each created
// whole and exclusively (durable.CreateOnce), so that a code or a
// challenge is spent once whatever races:
//
//	DIR/codes/HEX        a code: its principal and expiry; HEX is the
//	                     sha256 of the code, which is never stored
//	DIR/codes/HEX.used   the code spent
//	DIR/sessions/HEX     an enrolment begun: HEX is the sha256 of its
//	                     challenge; who, how authorised, until when
//	DIR/sessions/HEX.used  the enrolment finished (or tried)
//
// Everything a caller hands in (a code, a registration response) is a
// stranger's input: a code is checked for its form before it is hashed,
// and the challenge in a response names a file only through its hash.
package passkeyenroll

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// TypeRequest is an enrolment request signed by the principal's own key.
const TypeRequest = "application/vnd.prod-write.passkey-enrolment+json"

// Request is what a principal's key signs to begin an enrolment: who,
// the challenge of the ceremony it begins, and until when.
type Request struct {
	Principal string    `json:"principal"`
	Challenge string    `json:"challenge"`
	Issued    time.Time `json:"issued"`
	Expires   time.Time `json:"expires"`
}

const (
	// CodeTTL is how long a one-time code stands unless told otherwise;
	// MaxCodeTTL the longest it may.
	CodeTTL    = 15 * time.Minute
	MaxCodeTTL = 24 * time.Hour
	// SessionTTL is how long an enrolment begun waits for its answer.
	SessionTTL = 5 * time.Minute
	// codeBytes is a code's entropy: 160 bits, 32 base32 letters.
	codeBytes = 20
	codeLen   = 32
	// maxResponse bounds a registration response handed in (a real one
	// is a few KiB; the request carrying it is at most 64 KiB).
	maxResponse = 16 << 10
)

// How an enrolment was authorised.
const (
	ByKey  = "key"
	ByCode = "code"
)

var codeEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Enroller is the enrolment state of one service.
type Enroller struct {
	// Dir is the state directory's passkey-enrolment directory.
	Dir    string
	Policy *approval.Policy
	Now    func() time.Time
}

// codeRecord is a stored code, found by the code's hash.
type codeRecord struct {
	Principal string    `json:"principal"`
	Issued    time.Time `json:"issued"`
	Expires   time.Time `json:"expires"`
}

// session is a stored enrolment begun.
type session struct {
	Principal  string               `json:"principal"`
	Authorised string               `json:"authorised"`
	Request    *approval.Envelope   `json:"request,omitempty"`
	Expires    time.Time            `json:"expires"`
	WebAuthn   webauthn.SessionData `json:"webauthn"`
}

// IssueCode makes a one-time code that authorises one enrolment of
// principal within ttl (0: CodeTTL). The code is returned, once, and
// only its hash is kept.
func (e *Enroller) IssueCode(principal string, ttl time.Duration) (code string, expires time.Time, err error) {
	if _, ok := e.Policy.ByID(principal); !ok {
		return "", time.Time{}, refusal.New(refusal.PrincipalUnknown, "%q is not a principal of the trust policy", principal).Needs("a [[principal]] with this id in trust.toml")
	}
	if ttl == 0 {
		ttl = CodeTTL
	}
	if ttl < 0 || ttl > MaxCodeTTL {
		return "", time.Time{}, refusal.New(refusal.ParamInvalid, "a code's ttl must be above 0 and at most %s", MaxCodeTTL)
	}
	var raw [codeBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", time.Time{}, fmt.Errorf("making a code: %w", err)
	}
	code = codeEncoding.EncodeToString(raw[:])
	now := e.Now().UTC()
	rec, err := json.Marshal(codeRecord{Principal: principal, Issued: now, Expires: now.Add(ttl)})
	if err != nil {
		return "", time.Time{}, err
	}
	dir := filepath.Join(e.Dir, "codes")
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return "", time.Time{}, fmt.Errorf("passkey enrolment codes: %w", err)
	}
	if err := durable.CreateOnce(filepath.Join(dir, codeHash(code)), rec, 0o600); err != nil {
		return "", time.Time{}, fmt.Errorf("storing the code's hash: %w", err)
	}
	return code, now.Add(ttl), nil
}

// codeHash names a code's file: sha256 over a domain and the code.
func codeHash(code string) string {
	h := sha256.Sum256([]byte("prod-write passkey enrolment code v1\x00" + code))
	return hex.EncodeToString(h[:])
}

// errCode is the one refusal for a code that is not a live code: the
// caller learns nothing of which codes exist.
func errCode(why string) error {
	return refusal.New(refusal.SignatureInvalid, "the enrolment code %s", why).Needs("a new code from an operator: prod-write passkey code PRINCIPAL")
}

// spendCode checks code and spends it, returning its principal: a code
// of the wrong form or unknown is refused, an expired one refused
// evidence_expired, a spent one evidence_consumed. Spending is the
// exclusive creation of its .used file: of two callers with one code,
// exactly one begins.
func (e *Enroller) spendCode(code string) (string, error) {
	code = strings.ToUpper(strings.TrimSpace(code))
	if len(code) != codeLen {
		return "", errCode("is not one: want the 32 letters and digits `passkey code` printed")
	}
	if _, err := codeEncoding.DecodeString(code); err != nil {
		return "", errCode("is not one: want the 32 letters and digits `passkey code` printed")
	}
	path := filepath.Join(e.Dir, "codes", codeHash(code))
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", errCode("was not issued by this service")
	}
	if err != nil {
		return "", fmt.Errorf("reading the enrolment code: %w", err)
	}
	var rec codeRecord
	if err := strictjson.Unmarshal(b, &rec); err != nil {
		return "", fmt.Errorf("the stored enrolment code does not decode: %w", err)
	}
	if !e.Now().Before(rec.Expires) {
		return "", refusal.New(refusal.EvidenceExpired, "the enrolment code expired at %s", rec.Expires.Format(time.RFC3339)).Needs("a new code from an operator: prod-write passkey code " + rec.Principal)
	}
	err = durable.CreateOnce(path+".used", []byte(e.Now().UTC().Format(time.RFC3339Nano)+"\n"), 0o600)
	if errors.Is(err, os.ErrExist) {
		return "", refusal.New(refusal.EvidenceConsumed, "the enrolment code was used already: a code enrols once").Needs("a new code from an operator: prod-write passkey code " + rec.Principal)
	}
	if err != nil {
		return "", fmt.Errorf("spending the enrolment code: %w", err)
	}
	if _, ok := e.Policy.ByID(rec.Principal); !ok {
		return "", refusal.New(refusal.PrincipalUnknown, "the code's principal %q is no longer in the trust policy", rec.Principal)
	}
	return rec.Principal, nil
}

// rp is the relying party of the policy's approval page.
func (e *Enroller) rp() (*webauthn.WebAuthn, error) {
	if e.Policy.Passkey == nil {
		return nil, refusal.New(refusal.SignatureInvalid, "the trust policy has no [passkey] table naming the approval page's origin, so no passkey can be enrolled").Needs("[passkey] origin = \"https://…\" in trust.toml (root adds it)")
	}
	origin := e.Policy.Passkey.Origin
	u, err := url.Parse(origin)
	if err != nil {
		return nil, fmt.Errorf("the policy's passkey origin: %w", err)
	}
	wa, err := webauthn.New(&webauthn.Config{
		RPID:          u.Hostname(),
		RPDisplayName: "prod-write",
		RPOrigins:     []string{origin},
		// The attestation is not judged: root vouches for the key by
		// adding it to the policy. Verification is asked of the
		// authenticator, and checked.
		AttestationPreference: protocol.PreferNoAttestation,
		// Discoverable: the approval page's sign-in names no
		// credential (it would tell a stranger which are enrolled), so
		// a credential the authenticator cannot find by itself could
		// never sign in there.
		AuthenticatorSelection: protocol.AuthenticatorSelection{
			ResidentKey:        protocol.ResidentKeyRequirementRequired,
			RequireResidentKey: protocol.ResidentKeyRequired(),
			UserVerification:   protocol.VerificationRequired,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("the WebAuthn relying party of %s: %w", origin, err)
	}
	return wa, nil
}

// user is a principal as WebAuthn names it: its user handle is
// approval.PasskeyUserHandle of its id, the same for each of its
// credentials, which the gate checks each assertion's against
// (docs/adr/0043-passkey-assertions-as-evidence.md).
type user struct{ id string }

func (u user) WebAuthnID() []byte          { return approval.PasskeyUserHandle(u.id) }
func (u user) WebAuthnName() string        { return u.id }
func (u user) WebAuthnDisplayName() string { return u.id }

// WebAuthnCredentials is none: the policy's credentials are excluded in
// the options, and the library judges a registration by none of them.
func (u user) WebAuthnCredentials() []webauthn.Credential { return nil }

// Begun is an enrolment begun: the options the approval page hands to
// navigator.credentials.create, and until when its answer is awaited.
type Begun struct {
	Principal  string
	Authorised string
	Options    *protocol.CredentialCreation
	Expires    time.Time
}

// BeginWithKey begins an enrolment of k's principal, authorised by an
// enrolment request k signs (kept with the session).
func (e *Enroller) BeginWithKey(k *keys.Private) (*Begun, error) {
	pr, ok := e.Policy.ByKey(k.Public().ID())
	if !ok {
		return nil, refusal.New(refusal.PrincipalUnknown, "the key belongs to no principal of the trust policy").Needs("a principal with this key in trust.toml")
	}
	return e.begin(pr.ID, ByKey, k)
}

// BeginWithCode begins an enrolment of the principal a one-time code was
// issued for, spending the code.
func (e *Enroller) BeginWithCode(code string) (*Begun, error) {
	if _, err := e.rp(); err != nil {
		return nil, err
	}
	principal, err := e.spendCode(code)
	if err != nil {
		return nil, err
	}
	return e.begin(principal, ByCode, nil)
}

func (e *Enroller) begin(principal, how string, k *keys.Private) (*Begun, error) {
	wa, err := e.rp()
	if err != nil {
		return nil, err
	}
	pr, _ := e.Policy.ByID(principal)
	// The principal's credentials already listed: an authenticator
	// holding one of them says so rather than making another.
	var exclude []protocol.CredentialDescriptor
	for _, c := range pr.Passkeys {
		id, err := base64.RawURLEncoding.DecodeString(c.ID)
		if err == nil {
			exclude = append(exclude, protocol.CredentialDescriptor{Type: protocol.PublicKeyCredentialType, CredentialID: id})
		}
	}
	opts, sd, err := wa.BeginRegistration(user{principal}, webauthn.WithExclusions(exclude))
	if err != nil {
		return nil, fmt.Errorf("beginning the WebAuthn registration: %w", err)
	}
	now := e.Now().UTC()
	s := session{Principal: principal, Authorised: how, Expires: now.Add(SessionTTL), WebAuthn: *sd}
	if k != nil {
		if s.Request, err = approval.Sign(k, TypeRequest, Request{Principal: principal, Challenge: sd.Challenge, Issued: now, Expires: s.Expires}); err != nil {
			return nil, fmt.Errorf("signing the enrolment request: %w", err)
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.Dir, "sessions")
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("passkey enrolment sessions: %w", err)
	}
	name, ok := challengeFile(sd.Challenge)
	if !ok {
		return nil, errors.New("the WebAuthn library made a challenge that is not base64url")
	}
	if err := durable.CreateOnce(filepath.Join(dir, name), b, 0o600); err != nil {
		return nil, fmt.Errorf("storing the enrolment: %w", err)
	}
	return &Begun{Principal: principal, Authorised: how, Options: opts, Expires: s.Expires}, nil
}

// challengeFile names the session of a challenge (base64url, as client
// data carries it): the hash of its bytes.
func challengeFile(challenge string) (string, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(challenge, "="))
	if err != nil || len(raw) == 0 {
		return "", false
	}
	h := sha256.Sum256(raw)
	return hex.EncodeToString(h[:]), true
}

// Enrolled is a credential enrolled: what root adds to trust.toml.
type Enrolled struct {
	Principal        string
	Authorised       string
	CredentialID     string // base64url
	PublicKey        string // cose:base64url COSE_Key
	UserVerification string
	Enrolled         time.Time
}

// Snippet is the credential as a trust.toml table, to be added right
// after the principal's [[principal]] table (a [[principal.passkey]]
// belongs to the [[principal]] above it).
func (en *Enrolled) Snippet() string {
	return fmt.Sprintf("# passkey of %s, enrolled %s (authorised by its %s): root adds it below [[principal]] id = %q\n"+
		"[[principal.passkey]]\nid = %q\nprincipal = %q\npublic_key = %q\nuser_verification = %q\n",
		en.Principal, en.Enrolled.Format(time.RFC3339), map[string]string{ByKey: "key", ByCode: "one-time code"}[en.Authorised], en.Principal,
		en.CredentialID, en.Principal, en.PublicKey, en.UserVerification)
}

// errSession is the refusal for a response that answers no live
// enrolment of this service.
func errSession(why string) error {
	return refusal.New(refusal.SignatureInvalid, "the registration answers %s", why).Needs("a new enrolment: prod-write passkey enroll begin")
}

// Finish verifies a registration response (the JSON of the
// PublicKeyCredential navigator.credentials.create returned) against the
// enrolment whose challenge it answers, spending that enrolment whatever
// the verdict, and returns the credential.
func (e *Enroller) Finish(response []byte) (*Enrolled, error) {
	wa, err := e.rp()
	if err != nil {
		return nil, err
	}
	if len(response) > maxResponse {
		return nil, refusal.New(refusal.SignatureInvalid, "the registration response is over %d bytes", maxResponse)
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(response)
	if err != nil {
		return nil, refusal.New(refusal.SignatureInvalid, "the registration response does not parse: %v", webauthnReason(err))
	}
	name, ok := challengeFile(parsed.Response.CollectedClientData.Challenge)
	if !ok {
		return nil, errSession("no challenge")
	}
	path := filepath.Join(e.Dir, "sessions", name)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errSession("a challenge this service did not issue")
	}
	if err != nil {
		return nil, fmt.Errorf("reading the enrolment: %w", err)
	}
	var s session
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("the stored enrolment does not decode: %w", err)
	}
	// Spent before it is judged: a response refused cannot be mended
	// and tried again against the same challenge.
	err = durable.CreateOnce(path+".used", []byte(e.Now().UTC().Format(time.RFC3339Nano)+"\n"), 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil, refusal.New(refusal.EvidenceConsumed, "the enrolment this registration answers was finished (or tried) already").Needs("a new enrolment: prod-write passkey enroll begin")
	}
	if err != nil {
		return nil, fmt.Errorf("spending the enrolment: %w", err)
	}
	if !e.Now().Before(s.Expires) {
		return nil, refusal.New(refusal.EvidenceExpired, "the enrolment expired at %s", s.Expires.Format(time.RFC3339)).Needs("a new enrolment: prod-write passkey enroll begin")
	}
	if _, ok := e.Policy.ByID(s.Principal); !ok {
		return nil, refusal.New(refusal.PrincipalUnknown, "%q is no longer a principal of the trust policy", s.Principal)
	}
	if s.Authorised == ByKey {
		// The enrolment request still verifies, by a key the principal
		// still holds.
		signed, err := e.Policy.Open(s.Request)
		if err != nil || signed.Signer.ID != s.Principal || signed.Type != TypeRequest {
			return nil, refusal.New(refusal.SignatureInvalid, "the enrolment request is no longer signed by a key of %s", s.Principal)
		}
	}
	cred, err := wa.CreateCredential(user{s.Principal}, s.WebAuthn, parsed)
	if err != nil {
		return nil, refusal.New(refusal.SignatureInvalid, "the registration does not verify: %v", webauthnReason(err))
	}
	id := base64.RawURLEncoding.EncodeToString(cred.ID)
	if _, ok := e.Policy.Credential(id); ok {
		return nil, refusal.New(refusal.SignatureInvalid, "credential %s is already in the trust policy", id)
	}
	if !bytes.Equal(parsed.RawID, cred.ID) {
		return nil, refusal.New(refusal.SignatureInvalid, "the response's raw id is not the attested credential's")
	}
	return &Enrolled{Principal: s.Principal, Authorised: s.Authorised, CredentialID: id,
		PublicKey: "cose:" + base64.RawURLEncoding.EncodeToString(cred.PublicKey), UserVerification: "required", Enrolled: e.Now().UTC()}, nil
}

// webauthnReason is what go-webauthn says of a failure: its details,
// which name the check that failed (origin, RP ID, challenge, flags).
func webauthnReason(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		if pe.DevInfo != "" {
			return pe.Details + ": " + pe.DevInfo
		}
		return pe.Details
	}
	return err.Error()
}
