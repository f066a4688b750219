package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/tomlpos"
)

// TypePasskey is a decision made with an approver's passkey: the raw
// WebAuthn assertion and the statement it signs
// (docs/adr/0043-passkey-assertions-as-evidence.md).
const TypePasskey = "application/vnd.prod-write.passkey+json"

// PasskeyAssertion is a WebAuthn assertion as the authenticator made it,
// kept raw so that the gate and replay verify it themselves.
type PasskeyAssertion struct {
	CredentialID      []byte `json:"credential_id"`
	AuthenticatorData []byte `json:"authenticator_data"`
	ClientDataJSON    []byte `json:"client_data_json"`
	Signature         []byte `json:"signature"`
	// UserHandle is the user handle the authenticator returned with the
	// assertion: [PasskeyUserHandle] of the principal the credential was
	// enrolled for. It is not covered by the signature; absent in
	// decisions stored before it was kept, and from a credential that is
	// not discoverable (docs/adr/0043-passkey-assertions-as-evidence.md).
	UserHandle []byte `json:"user_handle,omitempty"`
}

// PasskeyUserHandle is the WebAuthn user handle of principal: the first
// 16 bytes of sha256("prod-write principal\x00" + principal), the same
// for each of its credentials. Enrolment gives it to the authenticator,
// which returns it with every assertion of a discoverable credential;
// the gate checks it against the principal the assertion counts for
// (docs/adr/0043-passkey-assertions-as-evidence.md).
func PasskeyUserHandle(principal string) []byte {
	h := sha256.Sum256([]byte("prod-write principal\x00" + principal))
	return h[:16]
}

// PasskeyDecision is an approver's approve or deny, signed by its passkey.
// The fields of the statement (fingerprint, decision, expiry, nonce,
// record) are what the challenge is computed from; Reason and Issued are
// the storing service's, signed by its envelope only.
type PasskeyDecision struct {
	Fingerprint string           `json:"fingerprint"`
	Record      string           `json:"record,omitempty"`
	Decision    string           `json:"decision"`
	Approver    string           `json:"approver"`
	Reason      string           `json:"reason,omitempty"`
	Nonce       []byte           `json:"nonce"`
	Issued      time.Time        `json:"issued"`
	Expires     time.Time        `json:"expires"`
	Assertion   PasskeyAssertion `json:"assertion"`
}

// Statement is the statement d's assertion signs: version 2, which binds
// Issued. The gate also accepts version 1 ([PasskeyDecision.StatementV1]),
// what assertions made before version 2 sign.
func (d *PasskeyDecision) Statement() PasskeyStatement {
	return PasskeyStatement{Fingerprint: d.Fingerprint, Decision: d.Decision, Expires: d.Expires, Nonce: d.Nonce, Record: d.Record,
		Version: 2, Issued: d.Issued}
}

// StatementV1 is the version 1 statement of d: everything but Issued.
func (d *PasskeyDecision) StatementV1() PasskeyStatement {
	return PasskeyStatement{Fingerprint: d.Fingerprint, Decision: d.Decision, Expires: d.Expires, Nonce: d.Nonce, Record: d.Record, Version: 1}
}

// PasskeySeen is what the gate verified of a passkey decision.
type PasskeySeen struct {
	Credential   string `json:"credential"`
	SignCount    uint32 `json:"sign_count"`
	UserVerified bool   `json:"user_verified"`
	// Statement is the version of the statement the assertion signs: 2
	// binds the record's issued time, 1 does not.
	Statement int `json:"statement"`
}

// PasskeyCredential is a credential of a principal in trust.toml:
//
//	[[principal.passkey]]
//	id = "base64url credential id"
//	public_key = "cose:base64url COSE_Key"
//	user_verification = "required"   # or "preferred"; required when absent
type PasskeyCredential struct {
	ID string `toml:"id" json:"id"`
	// Principal is who the credential was enrolled for, as `passkey
	// enroll` wrote it in the snippet: pasted under another principal,
	// the policy does not load (snippets from before it carry none).
	Principal        string `toml:"principal" json:"principal,omitempty"`
	PublicKey        string `toml:"public_key" json:"public_key"`
	UserVerification string `toml:"user_verification" json:"user_verification,omitempty"`

	key       any
	principal *Principal
}

// RequiresUV reports whether the credential's assertions must carry the
// user-verified flag.
func (c *PasskeyCredential) RequiresUV() bool { return c.UserVerification != "preferred" }

// PasskeyPolicy is trust.toml's [passkey] table: the approval page's
// origin (its host is the WebAuthn RP ID) and where an approval counts only
// when made with a passkey.
type PasskeyPolicy struct {
	Origin             string   `toml:"origin" json:"origin"`
	RequiredTargets    []string `toml:"required_targets" json:"required_targets,omitempty"`
	RequiredOperations []string `toml:"required_operations" json:"required_operations,omitempty"`

	rpIDHash [32]byte
}

// PasskeyRequired reports whether an approval of operation op on target
// counts only when made with a passkey.
func (p *Policy) PasskeyRequired(op, target string) bool {
	return p.Passkey != nil && (slices.Contains(p.Passkey.RequiredTargets, target) || slices.Contains(p.Passkey.RequiredOperations, op))
}

// Credential returns the credential with the base64url id.
func (p *Policy) Credential(id string) (*PasskeyCredential, bool) {
	c, ok := p.byCredential[id]
	return c, ok
}

// PasskeysSpent lists what d spends of passkeys: for each credential
// whose approval d relies on, the highest sign count, sorted by
// credential. Run advances the store's counts to these; replay checks
// they move forward along the journal.
func (d *Decision) PasskeysSpent() []PasskeySeen {
	high := map[string]uint32{}
	for _, a := range d.Evidence {
		if a.Passkey == nil || !a.Valid || !slices.Contains(d.Relied, a.Signed) {
			continue
		}
		if c, ok := high[a.Passkey.Credential]; !ok || a.Passkey.SignCount > c {
			high[a.Passkey.Credential] = a.Passkey.SignCount
		}
	}
	out := make([]PasskeySeen, 0, len(high))
	for c, n := range high {
		out = append(out, PasskeySeen{Credential: c, SignCount: n})
	}
	slices.SortFunc(out, func(a, b PasskeySeen) int { return strings.Compare(a.Credential, b.Credential) })
	return out
}

// PasskeyCredentialIDs lists the ids of every credential the policy
// holds, sorted: the ones whose stored sign counts the gate needs.
func (p *Policy) PasskeyCredentialIDs() []string {
	ids := make([]string, 0, len(p.byCredential))
	for id := range p.byCredential {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// parsePasskeys checks the [passkey] table and every principal's
// credentials.
func (p *Policy) parsePasskeys(name string, data []byte) error {
	p.byCredential = map[string]*PasskeyCredential{}
	held := false
	for i, pr := range p.Principals {
		for j, c := range pr.Passkeys {
			held = true
			bad := func(key, format string, args ...any) error {
				return &ConfigError{File: name, Line: passkeyKeyLine(data, i, j, key),
					Msg: fmt.Sprintf("principal %d (%q) passkey %d: ", i+1, pr.ID, j+1) + fmt.Sprintf(format, args...)}
			}
			id, err := base64.RawURLEncoding.Strict().DecodeString(c.ID)
			if err != nil || len(id) == 0 {
				return bad("id", "id %q is not a credential id in unpadded base64url", c.ID)
			}
			raw, ok := bytes.CutPrefix([]byte(c.PublicKey), []byte("cose:"))
			if !ok {
				return bad("public_key", "public_key must be cose:<base64url COSE_Key>, as passkey enroll prints it")
			}
			cose, err := base64.RawURLEncoding.Strict().DecodeString(string(raw))
			if err != nil {
				return bad("public_key", "public_key is not unpadded base64url: %v", err)
			}
			if c.key, err = webauthncose.ParsePublicKey(cose); err != nil {
				return bad("public_key", "public_key is not a COSE key webauthn accepts: %v", err)
			}
			if c.Principal != "" && c.Principal != pr.ID {
				return bad("principal", "was enrolled for principal %q: under %q, %q's passkey would approve as %q; paste it below [[principal]] id = %q", c.Principal, pr.ID, c.Principal, pr.ID, c.Principal)
			}
			switch c.UserVerification {
			case "", "required", "preferred":
			default:
				return bad("user_verification", "user_verification %q is neither required nor preferred", c.UserVerification)
			}
			if other, dup := p.byCredential[c.ID]; dup {
				return bad("id", "credential %s is already %q's: one credential maps to exactly one principal", c.ID, other.principal.ID)
			}
			c.principal = pr
			p.byCredential[c.ID] = c
		}
	}
	if p.Passkey == nil {
		if held {
			return &ConfigError{File: name, Msg: "principals hold passkeys but there is no [passkey] table with the approval page's origin"}
		}
		return nil
	}
	bad := func(format string, args ...any) error {
		return &ConfigError{File: name, Line: tableKeyLine(data, "passkey", "origin"), Msg: "[passkey]: " + fmt.Sprintf(format, args...)}
	}
	u, err := url.Parse(p.Passkey.Origin)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Port() != "" && u.Hostname() == "" {
		return bad("origin %q is not an https origin (https://host[:port], nothing after it)", p.Passkey.Origin)
	}
	p.Passkey.rpIDHash = sha256.Sum256([]byte(u.Hostname()))
	return nil
}

// passkeyFailure is why a passkey decision does not count.
type passkeyFailure struct {
	code refusal.Code
	why  string
}

func pkFail(code refusal.Code, format string, args ...any) *passkeyFailure {
	return &passkeyFailure{code, fmt.Sprintf(format, args...)}
}

// verifyPasskey verifies d's assertion from the policy's credential public
// key: the credential and whose it is, the challenge recomputed from d's
// statement, the client data's type and origin, the RP ID hash, the
// user-present and (where required) user-verified flags, the signature
// over authenticatorData || sha256(clientDataJSON), the user handle when
// the assertion carries one, and the sign count moving forward from last
// (the highest count of the credential known to the caller; 0 when none).
func (p *Policy) verifyPasskey(d *PasskeyDecision, last map[string]uint32) (*PasskeyCredential, *PasskeySeen, *passkeyFailure) {
	as := d.Assertion
	credID := base64.RawURLEncoding.EncodeToString(as.CredentialID)
	cred, ok := p.Credential(credID)
	if !ok {
		return nil, nil, pkFail(refusal.PrincipalUnknown, "passkey credential %s is not in the trust policy (never enrolled, or removed)", credID)
	}
	if cred.principal.ID != d.Approver {
		return nil, nil, pkFail(refusal.SignatureInvalid, "passkey credential %s is %s's, not %s's", credID, cred.principal.ID, d.Approver)
	}
	var cd protocol.CollectedClientData
	if err := json.Unmarshal(as.ClientDataJSON, &cd); err != nil {
		return nil, nil, pkFail(refusal.SignatureInvalid, "client data does not decode: %v", err)
	}
	if cd.Type != protocol.AssertCeremony {
		return nil, nil, pkFail(refusal.SignatureInvalid, "client data type %q is not webauthn.get", cd.Type)
	}
	// Version 2 first; a version 1 assertion (made before version 2)
	// still verifies, its issued time then the service's word only.
	version := 2
	if want := PasskeyChallenge(d.Statement()); cd.Challenge != base64.RawURLEncoding.EncodeToString(want[:]) {
		version = 1
		if want := PasskeyChallenge(d.StatementV1()); cd.Challenge != base64.RawURLEncoding.EncodeToString(want[:]) {
			return nil, nil, pkFail(refusal.SignatureInvalid, "the assertion's challenge is not this decision's (another plan, decision, expiry, issued time, nonce or record)")
		}
	}
	if cd.Origin != p.Passkey.Origin || cd.CrossOrigin || cd.TopOrigin != "" {
		return nil, nil, pkFail(refusal.SignatureInvalid, "the assertion was made at origin %q, not the approval page %q", cd.Origin, p.Passkey.Origin)
	}
	var ad protocol.AuthenticatorData
	if err := ad.Unmarshal(as.AuthenticatorData); err != nil {
		return nil, nil, pkFail(refusal.SignatureInvalid, "authenticator data does not decode: %v", err)
	}
	if !bytes.Equal(ad.RPIDHash, p.Passkey.rpIDHash[:]) {
		return nil, nil, pkFail(refusal.SignatureInvalid, "the authenticator data's RP ID hash is not the approval page's")
	}
	if !ad.Flags.UserPresent() {
		return nil, nil, pkFail(refusal.SignatureInvalid, "the authenticator did not see the user present")
	}
	if cred.RequiresUV() && !ad.Flags.UserVerified() {
		return nil, nil, pkFail(refusal.SignatureInvalid, "user verification is required for credential %s and the authenticator did not verify the user", credID)
	}
	cdHash := sha256.Sum256(as.ClientDataJSON)
	signed := append(append(make([]byte, 0, len(as.AuthenticatorData)+32), as.AuthenticatorData...), cdHash[:]...)
	if ok, err := webauthncose.VerifySignature(cred.key, signed, as.Signature); err != nil || !ok {
		return nil, nil, pkFail(refusal.SignatureInvalid, "the passkey signature does not verify with credential %s", credID)
	}
	// The user handle is the authenticator's word of whom the credential
	// was made for. The signature does not cover it, so it stops no
	// forgery (the signature does); it catches a credential filed under
	// the wrong principal in trust.toml, whose assertions would otherwise
	// count for that principal. Absent, as from a credential that is not
	// discoverable or in a decision stored before it was kept, nothing
	// is checked (docs/adr/0043-passkey-assertions-as-evidence.md).
	if len(as.UserHandle) != 0 && !bytes.Equal(as.UserHandle, PasskeyUserHandle(d.Approver)) {
		return nil, nil, pkFail(refusal.SignatureInvalid, "passkey credential %s was enrolled for another principal than %s (its user handle is not %s's): it is filed under the wrong principal in trust.toml", credID, d.Approver, d.Approver)
	}
	// An authenticator without a counter always says 0 (WebAuthn §6.1.1);
	// otherwise the count must move forward.
	if prev := last[credID]; (ad.Counter != 0 || prev != 0) && ad.Counter <= prev {
		return nil, nil, pkFail(refusal.SignatureInvalid, "sign count %d of credential %s is not above %d, the last seen: a possible clone of the passkey", ad.Counter, credID, prev)
	}
	return cred, &PasskeySeen{Credential: credID, SignCount: ad.Counter, UserVerified: ad.Flags.UserVerified(), Statement: version}, nil
}

// passkeyKeyLine returns the line of key in the j-th [[principal.passkey]]
// table of the i-th [[principal]], or the line of that table's header when
// key is not in it; 0 when neither can be found.
func passkeyKeyLine(data []byte, i, j int, key string) int {
	n, m, header := -1, -1, 0
	for l, code := range tomlpos.CodeLines(data) {
		t := strings.Join(strings.Fields(code), "")
		switch {
		case strings.HasPrefix(t, "[[principal]]"):
			n, m = n+1, -1
		case strings.HasPrefix(t, "[[principal.passkey]]"):
			if n == i {
				m++
				if m == j {
					header = l + 1
				}
			}
		case strings.HasPrefix(t, "["):
			m = -2
		case n == i && m == j && strings.HasPrefix(t, key+"="):
			return l + 1
		}
	}
	return header
}

// tableKeyLine returns the line of key in the [table] of data, or of the
// table's header; 0 when neither is there.
func tableKeyLine(data []byte, table, key string) int {
	in, header := false, 0
	for l, code := range tomlpos.CodeLines(data) {
		t := strings.Join(strings.Fields(code), "")
		switch {
		case t == "["+table+"]":
			in, header = true, l+1
		case strings.HasPrefix(t, "["):
			in = false
		case in && strings.HasPrefix(t, key+"="):
			return l + 1
		}
	}
	return header
}
