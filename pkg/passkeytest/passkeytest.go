// Package passkeytest is a software WebAuthn authenticator for tests: an
// ES256 key made in the test, answering registration options with a
// registration response (attestation "none", CBOR by
// github.com/fxamacker/cbor/v2) and challenges with assertions, as a
// browser and a platform authenticator would.
package passkeytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fxamacker/cbor/v2"

	"github.com/prod-write/prod-write/approval"
)

// The authenticator data flags (WebAuthn §6.1).
const (
	FlagUP = 0x01
	FlagUV = 0x04
	FlagAT = 0x40
)

// Authenticator is one credential of a software authenticator.
type Authenticator struct {
	Key   *ecdsa.PrivateKey
	ID    []byte
	Count uint32
	// UserHandle is the user handle the credential was made for, which
	// a discoverable credential returns with each assertion: the
	// registration options' user.id ([Authenticator.Register] keeps it),
	// approval.PasskeyUserHandle of the principal as enrolment makes it.
	// Nil: assertions carry none, as a non-discoverable credential's.
	UserHandle []byte
}

// New makes a credential: a fresh P-256 key and a random 16-byte id.
func New() (*Authenticator, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	return &Authenticator{Key: k, ID: id}, nil
}

// NewFor is [New] with a discoverable credential made for principal: its
// assertions carry approval.PasskeyUserHandle(principal), as those of a
// credential `passkey enroll` made for principal do.
func NewFor(principal string) (*Authenticator, error) {
	a, err := New()
	if err != nil {
		return nil, err
	}
	a.UserHandle = approval.PasskeyUserHandle(principal)
	return a, nil
}

// CredentialID is the credential's id, base64url as trust.toml holds it.
func (a *Authenticator) CredentialID() string { return base64.RawURLEncoding.EncodeToString(a.ID) }

// COSE is the credential's public key as a COSE_Key (EC2, ES256, P-256).
func (a *Authenticator) COSE() ([]byte, error) {
	pub, err := a.Key.PublicKey.ECDH()
	if err != nil {
		return nil, err
	}
	raw := pub.Bytes()
	em, err := cbor.CTAP2EncOptions().EncMode()
	if err != nil {
		return nil, err
	}
	return em.Marshal(map[int]any{1: 2, 3: -7, -1: 1, -2: raw[1:33], -3: raw[33:]})
}

// Registration says how a registration response is made; the zero value
// answers the options as a browser at Origin would.
type Registration struct {
	// Origin is where the page runs, as the browser writes it into the
	// client data.
	Origin string
	// RPID is hashed into the authenticator data (default: the options'
	// rp.id).
	RPID string
	// Challenge replaces the options' challenge (base64url).
	Challenge string
	// Flags (default UP|UV; AT is always set).
	Flags byte
}

// Register answers registration options (the JSON of the
// CredentialCreation a relying party sends) with the JSON of the
// PublicKeyCredential navigator.credentials.create returns. As a
// discoverable credential, it keeps the options' user.id as its
// UserHandle when it has none yet.
func (a *Authenticator) Register(options []byte, r Registration) ([]byte, error) {
	var opts struct {
		PublicKey struct {
			Challenge string `json:"challenge"`
			RP        struct {
				ID string `json:"id"`
			} `json:"rp"`
			User struct {
				ID string `json:"id"`
			} `json:"user"`
		} `json:"publicKey"`
	}
	if err := json.Unmarshal(options, &opts); err != nil {
		return nil, fmt.Errorf("registration options: %w", err)
	}
	if a.UserHandle == nil && opts.PublicKey.User.ID != "" {
		h, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(opts.PublicKey.User.ID, "="))
		if err != nil {
			return nil, fmt.Errorf("registration options: user.id %q is not base64url: %w", opts.PublicKey.User.ID, err)
		}
		a.UserHandle = h
	}
	challenge, rpID, flags := opts.PublicKey.Challenge, opts.PublicKey.RP.ID, byte(FlagUP|FlagUV)
	if r.Challenge != "" {
		challenge = r.Challenge
	}
	if r.RPID != "" {
		rpID = r.RPID
	}
	if r.Flags != 0 {
		flags = r.Flags
	}
	cdj, err := json.Marshal(map[string]any{"type": "webauthn.create", "challenge": challenge, "origin": r.Origin, "crossOrigin": false})
	if err != nil {
		return nil, err
	}
	key, err := a.COSE()
	if err != nil {
		return nil, err
	}
	rp := sha256.Sum256([]byte(rpID))
	ad := append(rp[:], flags|FlagAT)
	ad = binary.BigEndian.AppendUint32(ad, a.Count)
	ad = append(ad, make([]byte, 16)...) // AAGUID: none
	ad = binary.BigEndian.AppendUint16(ad, uint16(len(a.ID)))
	ad = append(ad, a.ID...)
	ad = append(ad, key...)
	em, err := cbor.CTAP2EncOptions().EncMode()
	if err != nil {
		return nil, err
	}
	att, err := em.Marshal(map[string]any{"fmt": "none", "attStmt": map[string]any{}, "authData": ad})
	if err != nil {
		return nil, err
	}
	b64 := base64.RawURLEncoding.EncodeToString
	return json.Marshal(map[string]any{
		"id": b64(a.ID), "rawId": b64(a.ID), "type": "public-key",
		"response":               map[string]any{"clientDataJSON": b64(cdj), "attestationObject": b64(att), "transports": []string{"internal"}},
		"clientExtensionResults": map[string]any{},
	})
}

// Assert signs challenge at origin for rpID, with the user present and
// verified, its sign count one above the last; the assertion carries the
// credential's UserHandle (which the signature does not cover).
func (a *Authenticator) Assert(challenge []byte, origin, rpID string) (approval.PasskeyAssertion, error) {
	a.Count++
	cdj, err := json.Marshal(map[string]any{"type": "webauthn.get", "challenge": base64.RawURLEncoding.EncodeToString(challenge), "origin": origin, "crossOrigin": false})
	if err != nil {
		return approval.PasskeyAssertion{}, err
	}
	rp := sha256.Sum256([]byte(rpID))
	ad := append(rp[:], FlagUP|FlagUV)
	ad = binary.BigEndian.AppendUint32(ad, a.Count)
	h := sha256.Sum256(cdj)
	digest := sha256.Sum256(append(append([]byte(nil), ad...), h[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, a.Key, digest[:])
	if err != nil {
		return approval.PasskeyAssertion{}, err
	}
	return approval.PasskeyAssertion{CredentialID: a.ID, AuthenticatorData: ad, ClientDataJSON: cdj, Signature: sig, UserHandle: a.UserHandle}, nil
}

// AssertJSON is [Authenticator.Assert] as a browser hands it to a page:
// the JSON of the PublicKeyCredential navigator.credentials.get returns,
// its binary fields base64url.
func (a *Authenticator) AssertJSON(challenge []byte, origin, rpID string) ([]byte, error) {
	as, err := a.Assert(challenge, origin, rpID)
	if err != nil {
		return nil, err
	}
	b64 := base64.RawURLEncoding.EncodeToString
	resp := map[string]any{"clientDataJSON": b64(as.ClientDataJSON), "authenticatorData": b64(as.AuthenticatorData), "signature": b64(as.Signature)}
	if len(as.UserHandle) != 0 {
		resp["userHandle"] = b64(as.UserHandle)
	}
	return json.Marshal(map[string]any{
		"id": b64(as.CredentialID), "rawId": b64(as.CredentialID), "type": "public-key",
		"response":               resp,
		"clientExtensionResults": map[string]any{},
	})
}
