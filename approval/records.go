package approval

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/prod-write/prod-write/pkg/dsse"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// DSSE payload types, one per kind of record (docs/DESIGN.md §5).
const (
	TypePlan     = "application/vnd.prod-write.plan+json"
	TypeGera     = "application/vnd.prod-write.gera+json"
	TypeSmith    = "application/vnd.prod-write.smith+json"
	TypeTrinity  = "application/vnd.prod-write.trinity+json"
	TypeWithdraw = "application/vnd.prod-write.withdraw+json"
)

// Envelope is a DSSE envelope.
type Envelope = dsse.Envelope

// Gera decisions.
const (
	Go   = "go"
	NoGo = "no-go"
)

// GeraDecision is a standing go / no-go for a fingerprint.
type GeraDecision struct {
	Fingerprint string    `json:"fingerprint"`
	Decision    string    `json:"decision"`
	Uses        int       `json:"uses"`
	Decider     string    `json:"decider"`
	Reason      string    `json:"reason,omitempty"`
	Issued      time.Time `json:"issued"`
	Expires     time.Time `json:"expires"`
}

// Certainty levels of a Smith record.
var CertaintyLevels = []string{"high", "medium", "low"}

// CertaintyRecord is an operator's account of a plan (Smith).
type CertaintyRecord struct {
	Fingerprint string    `json:"fingerprint"`
	Summary     string    `json:"summary"`
	Effect      string    `json:"effect"`
	BlastRadius string    `json:"blast_radius"`
	Rollback    string    `json:"rollback"`
	Certainty   string    `json:"certainty"`
	Filer       string    `json:"filer"`
	Issued      time.Time `json:"issued"`
	Expires     time.Time `json:"expires"`
}

// DefaultAnswerTTL is how long a Trinity answer lives by default (docs/DESIGN.md §5).
const DefaultAnswerTTL = time.Hour

// Answers to a decision.
const (
	Approve = "approve"
	Deny    = "deny"
)

// Answer is a human's answer (Trinity), given on the CLI or attested by a
// bridge.
type Answer struct {
	Fingerprint string `json:"fingerprint"`
	// Record is the ID of the certainty record this answers; a deny may
	// leave it empty, since it vetoes the fingerprint outright.
	Record   string    `json:"record,omitempty"`
	Answer   string    `json:"answer"`
	Reason   string    `json:"reason,omitempty"`
	Approver string    `json:"approver"`
	Channel  *Channel  `json:"channel,omitempty"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
}

// Channel is the evidence a bridge saw: who clicked or commented, where.
type Channel struct {
	Kind          string `json:"kind"` // "slack" or "github"
	SlackUser     string `json:"slack_user,omitempty"`
	SlackTeam     string `json:"slack_team,omitempty"`
	SlackActionTS string `json:"slack_action_ts,omitempty"`
	GitHubLogin   string `json:"github_login,omitempty"`
	GitHubComment int64  `json:"github_comment_id,omitempty"`
	GitHubRepo    string `json:"github_repo,omitempty"`
	// GitHubUserID is the author's numeric user id, which the bridge
	// mapped; GitHubReview is set instead of GitHubComment for a pull
	// request review (docs/BRIDGES.md).
	GitHubUserID int64 `json:"github_user_id,omitempty"`
	GitHubReview int64 `json:"github_review_id,omitempty"`
}

// Withdrawal is the planner's terminal withdrawal of its own plan.
type Withdrawal struct {
	Fingerprint string    `json:"fingerprint"`
	Planner     string    `json:"planner"`
	Issued      time.Time `json:"issued"`
}

// Sign encodes v as JSON and signs it as a DSSE envelope of payloadType.
func Sign(k *keys.Private, payloadType string, v any) (*Envelope, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return dsse.Sign(context.Background(), k, payloadType, body)
}

// ID identifies a record by what was signed: the sha256 of its DSSE
// pre-authentication encoding. Re-encoding the base64 payload or adding
// signatures does not change it, so consumption cannot be dodged that way.
func ID(env *Envelope) (string, error) {
	body, err := decodePayload(env)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(dsse.PAE(env.PayloadType, body))
	return hex.EncodeToString(sum[:]), nil
}

// decodePayload accepts only standard base64, so one record has one
// encoding.
func decodePayload(env *Envelope) ([]byte, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(env.Payload)
	if err != nil {
		return nil, fmt.Errorf("envelope payload: %w", err)
	}
	return b, nil
}

// Signed is a record whose signature verified against the policy.
type Signed struct {
	Env     *Envelope
	ID      string
	Type    string
	Payload []byte
	Signer  *Principal
}

// Open verifies env: exactly one signature, by a key of the policy, valid
// over the payload. It returns refusals signature_invalid or
// principal_unknown; it does not check roles (the caller knows which role
// the signer acts in).
func (p *Policy) Open(env *Envelope) (*Signed, error) {
	if env == nil {
		return nil, refusal.New(refusal.SignatureInvalid, "no envelope")
	}
	body, err := decodePayload(env)
	if err != nil {
		return nil, refusal.New(refusal.SignatureInvalid, "%v", err)
	}
	if len(env.Signatures) != 1 {
		return nil, refusal.New(refusal.SignatureInvalid, "record carries %d signatures, want exactly 1", len(env.Signatures))
	}
	pr, ok := p.ByKey(env.Signatures[0].KeyID)
	if !ok {
		return nil, refusal.New(refusal.PrincipalUnknown, "record is signed by key %.16s…, which is in no principal of the trust policy", env.Signatures[0].KeyID)
	}
	pae := dsse.PAE(env.PayloadType, body)
	sum := sha256.Sum256(pae)
	if !p.verified(pr, sum, env.Signatures[0].Sig, pae) {
		return nil, refusal.New(refusal.SignatureInvalid, "signature of %s's record does not verify", pr.ID)
	}
	return &Signed{Env: env, ID: hex.EncodeToString(sum[:]), Type: env.PayloadType, Payload: body, Signer: pr}, nil
}

// verified checks sig over pae with pr's key, by the one rule of
// keys.Verify (docs/adr/0013-signature-rule.md), remembering successes
// when the policy caches: replay meets the same plan and evidence in many
// receipts and verifies each distinct envelope once.
func (p *Policy) verified(pr *Principal, sum [32]byte, sig string, pae []byte) bool {
	var key [32]byte
	if p.cache != nil {
		key = cacheKey(sum, pr.pub, sig)
		if _, ok := p.cache.Load(key); ok {
			return true
		}
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || !keys.Verify(pr.pub, pae, raw) {
		return false
	}
	p.remember(key)
	return true
}

// cacheKey binds a verification to the message, the key and the signature.
func cacheKey(sum [32]byte, pub keys.Public, sig string) [32]byte {
	h := sha256.New()
	h.Write(sum[:])
	h.Write(pub)
	h.Write([]byte(sig))
	var key [32]byte
	copy(key[:], h.Sum(nil))
	return key
}

func (p *Policy) remember(key [32]byte) {
	if p.cache == nil {
		return
	}
	// Bounded: replay streams any number of receipts, and most records
	// appear in one or a few of them.
	if p.cached.Add(1) > maxCached {
		p.cache.Clear()
		p.cached.Store(0)
	}
	p.cache.Store(key, struct{}{})
}

const maxCached = 1 << 14

// VerifyBatch checks the signatures of envs together, by ed25519 batch
// verification (about twice as fast per signature as one by one), and
// remembers those that verify, so that [Policy.Open] of them then costs no
// verification. It does nothing unless the policy caches. When the batch
// fails, each signature is checked alone, so one bad signature costs the
// others nothing but time. Envelopes it cannot check (unknown key, bad
// encoding) are left for Open to report.
//
// The batch, the one-by-one fallback and Open apply the same rule
// (ZIP-215, keys.Verify and keys.Batch), so whether a signature is accepted
// never depends on the batch it was in (docs/adr/0013-signature-rule.md).
func (p *Policy) VerifyBatch(envs []*Envelope) {
	if p.cache == nil || len(envs) == 0 {
		return
	}
	type item struct {
		key      [32]byte
		pub      keys.Public
		pae, sig []byte
	}
	items := make([]item, 0, len(envs))
	batch := keys.NewBatch(len(envs))
	for _, env := range envs {
		if env == nil || len(env.Signatures) != 1 {
			continue
		}
		pr, ok := p.ByKey(env.Signatures[0].KeyID)
		if !ok {
			continue
		}
		body, err := decodePayload(env)
		if err != nil {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
		if err != nil || len(sig) != signatureSize {
			continue
		}
		pae := dsse.PAE(env.PayloadType, body)
		key := cacheKey(sha256.Sum256(pae), pr.pub, env.Signatures[0].Sig)
		if _, ok := p.cache.Load(key); ok {
			continue
		}
		batch.Add(pr.pub, pae, sig)
		items = append(items, item{key: key, pub: pr.pub, pae: pae, sig: sig})
	}
	if len(items) == 0 {
		return
	}
	if batch.Verify() {
		for _, it := range items {
			p.remember(it.key)
		}
		return
	}
	for _, it := range items {
		if keys.Verify(it.pub, it.pae, it.sig) {
			p.remember(it.key)
		}
	}
}

// signatureSize is an ed25519 signature's length: a batch holding one of
// another length would fail whatever else it holds.
const signatureSize = 64

// CacheVerifications makes the policy remember signatures it has verified.
func (p *Policy) CacheVerifications() { p.cache = &sync.Map{} }

// VerifyWith checks env's single signature against pub, by the rule of
// [Policy.Open].
func VerifyWith(pub keys.Public, env *Envelope) error {
	body, err := decodePayload(env)
	if err != nil {
		return err
	}
	if len(env.Signatures) != 1 {
		return fmt.Errorf("%d signatures, want exactly 1", len(env.Signatures))
	}
	sig, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		return fmt.Errorf("signature encoding: %w", err)
	}
	return keys.Verifier{Key: pub}.Verify(context.Background(), dsse.PAE(env.PayloadType, body), sig)
}

// Decode unmarshals the payload of s into v strictly (pkg/strictjson):
// exact-case keys, no duplicates, nothing after the value, no unknown
// fields; what an independent verifier in another language reads the same.
func (s *Signed) Decode(v any) error {
	if err := strictjson.Unmarshal(s.Payload, v); err != nil {
		return refusal.New(refusal.SignatureInvalid, "record %.12s… does not decode as %s: %v", s.ID, s.Type, err)
	}
	return nil
}

// DecodePlan opens and decodes a signed plan, checking that its fingerprint
// is the one its recorded inputs give and that its signer is its planner
// and holds the agent role.
func (p *Policy) DecodePlan(env *Envelope) (*operations.Plan, *Signed, error) {
	s, err := p.Open(env)
	if err != nil {
		return nil, nil, err
	}
	if s.Type != TypePlan {
		return nil, nil, refusal.New(refusal.SignatureInvalid, "record is a %s, not a plan", s.Type)
	}
	var plan operations.Plan
	if err := s.Decode(&plan); err != nil {
		return nil, nil, err
	}
	if err := plan.Check(); err != nil {
		return nil, nil, err
	}
	if !s.Signer.Has(RoleAgent) {
		return nil, nil, refusal.New(refusal.RoleMissing, "plan is signed by %s, who lacks the agent role", s.Signer.ID).For(plan.Operation, plan.Fingerprint)
	}
	if plan.Planner != s.Signer.ID {
		return nil, nil, refusal.New(refusal.SignatureInvalid, "plan names planner %q but is signed by %s", plan.Planner, s.Signer.ID).For(plan.Operation, plan.Fingerprint)
	}
	return &plan, s, nil
}
