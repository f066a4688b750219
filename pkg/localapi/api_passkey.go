package localapi

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/passkeyapprove"
	"github.com/prod-write/prod-write/pkg/passkeyenroll"
)

// Passkey enrolment, in-process and through the runner service
// (docs/adr/0043-passkey-assertions-as-evidence.md). What the caller
// hands over (a principal's name, a code, a registration response) is a
// stranger's input to the service: passkeyenroll checks a code's form
// before hashing it, names files only by hashes, and verifies the
// response with go-webauthn against a challenge it issued, once.

// The approval page's calls (docs/adr/0048-approval-page.md). The page's
// server is a bridge: it asks for a statement with its bridge key, and
// hands back the approver's assertion in a decision it signed with that
// key. What it sends is a stranger's input all the same: the service
// compares the statement with the one it issued, spends the nonce once,
// and stores the decision only when the gate verifies it.

// Enroller is the enrolment state of f's deployment, judged by its policy.
func (f *Env) Enroller() (*passkeyenroll.Enroller, error) {
	c, err := f.Config()
	if err != nil {
		return nil, err
	}
	p, err := f.Policy(c)
	if err != nil {
		return nil, err
	}
	return &passkeyenroll.Enroller{Dir: filepath.Join(c.State, "passkey-enrol"), Policy: p, Now: f.Now}, nil
}

func (a API) PasskeyCode(_ context.Context, req api.PasskeyCodeRequest) (*api.PasskeyCodeResult, error) {
	if strings.TrimSpace(req.Principal) == "" {
		return nil, &UsageError{Msg: "passkey code needs the principal it enrols"}
	}
	e, err := a.Env.Enroller()
	if err != nil {
		return nil, err
	}
	code, exp, err := e.IssueCode(req.Principal, req.TTL)
	if err != nil {
		return nil, err
	}
	return &api.PasskeyCodeResult{FormatVersion: FormatVersion, Principal: req.Principal, Code: code, Expires: exp}, nil
}

func (a API) PasskeyEnrollBegin(_ context.Context, req api.PasskeyEnrollBeginRequest) (*api.PasskeyEnrollBeginResult, error) {
	e, err := a.Env.Enroller()
	if err != nil {
		return nil, err
	}
	c, err := a.Env.Config()
	if err != nil {
		return nil, err
	}
	origin := PageOrigin(c, e.Policy)
	if req.Page && origin == "" {
		// Before a code is spent or a session kept.
		return nil, &config.Error{Path: c.Path, Msg: "this deployment serves no approval page to enrol on: it needs [bridge] page_listen and trust.toml's [passkey] origin (or use passkey enroll begin and finish)"}
	}
	var b *passkeyenroll.Begun
	if req.Code != "" {
		b, err = e.BeginWithCode(req.Code)
	} else {
		k, _, kerr := a.Env.Actor(e.Policy, "")
		if kerr != nil {
			return nil, kerr
		}
		b, err = e.BeginWithKey(k)
	}
	if err != nil {
		return nil, err
	}
	opts, err := json.Marshal(b.Options)
	if err != nil {
		return nil, err
	}
	r := &api.PasskeyEnrollBeginResult{FormatVersion: FormatVersion, Principal: b.Principal, Authorised: b.Authorised, Expires: b.Expires, Options: opts}
	if origin != "" {
		r.Page = approvalpage.EnrollURL(origin, opts)
	}
	return r, nil
}

func (a API) PasskeyEnrollFinish(_ context.Context, req api.PasskeyEnrollFinishRequest) (*api.PasskeyEnrollFinishResult, error) {
	if len(req.Response) == 0 {
		return nil, &UsageError{Msg: "passkey enroll finish needs the registration response"}
	}
	e, err := a.Env.Enroller()
	if err != nil {
		return nil, err
	}
	en, err := e.Finish(req.Response)
	if err != nil {
		return nil, err
	}
	return &api.PasskeyEnrollFinishResult{FormatVersion: FormatVersion, Principal: en.Principal, Authorised: en.Authorised, Credential: en.CredentialID,
		PublicKey: en.PublicKey, UserVerification: en.UserVerification, Enrolled: en.Enrolled, Snippet: en.Snippet()}, nil
}

// Approvals is the passkey-approval state of f's deployment and the source
// its decisions are judged against.
func (f *Env) Approvals() (*passkeyapprove.Issuer, bridge.Source, error) {
	c, err := f.Config()
	if err != nil {
		return nil, bridge.Source{}, err
	}
	p, err := f.Policy(c)
	if err != nil {
		return nil, bridge.Source{}, err
	}
	reg, err := f.Registry(c)
	if err != nil {
		return nil, bridge.Source{}, err
	}
	st, err := f.Store(c)
	if err != nil {
		return nil, bridge.Source{}, err
	}
	return &passkeyapprove.Issuer{Dir: filepath.Join(c.State, "passkey-approve"), Now: f.Now}, bridge.Source{Policy: p, Registry: reg, Store: st}, nil
}

func (a API) PasskeyChallenge(_ context.Context, req api.PasskeyChallengeRequest) (*api.PasskeyChallengeResult, error) {
	iss, src, err := a.Env.Approvals()
	if err != nil {
		return nil, err
	}
	// Only the page's server (a bridge) has statements issued: a nonce
	// is state the service keeps, not for any caller to pile up.
	if _, _, err := a.Env.Actor(src.Policy, approval.RoleBridge); err != nil {
		return nil, err
	}
	st, err := iss.Challenge(src, req.Fingerprint, req.Decision, req.Record)
	if err != nil {
		return nil, err
	}
	return &api.PasskeyChallengeResult{FormatVersion: FormatVersion, Fingerprint: st.Fingerprint, Decision: st.Decision, Record: st.Record,
		Version: st.Version, Nonce: st.Nonce, Issued: st.Issued, Expires: st.Expires, Challenge: st.Challenge[:]}, nil
}

func (a API) PasskeyAttested(_ context.Context, req api.PasskeyAttestedRequest) (*api.PasskeyAttestedResult, error) {
	iss, src, err := a.Env.Approvals()
	if err != nil {
		return nil, err
	}
	r, err := iss.Admit(src, req.Envelope, a.Env.Now().UTC())
	if err != nil {
		return nil, err
	}
	return &api.PasskeyAttestedResult{FormatVersion: FormatVersion, ID: r.ID, Fingerprint: r.Fingerprint, Approver: r.Approver, Decision: r.Decision,
		Credential: r.Credential, UserVerified: r.UserVerified}, nil
}

func (a ServiceClient) PasskeyCode(ctx context.Context, req api.PasskeyCodeRequest) (*api.PasskeyCodeResult, error) {
	return call(ctx, a, api.CallPasskeyCode, req, nil)
}

func (a ServiceClient) PasskeyEnrollBegin(ctx context.Context, req api.PasskeyEnrollBeginRequest) (*api.PasskeyEnrollBeginResult, error) {
	return call(ctx, a, api.CallEnrollBegin, req, nil)
}

func (a ServiceClient) PasskeyEnrollFinish(ctx context.Context, req api.PasskeyEnrollFinishRequest) (*api.PasskeyEnrollFinishResult, error) {
	return call(ctx, a, api.CallEnrollFinish, req, nil)
}

func (a ServiceClient) PasskeyChallenge(ctx context.Context, req api.PasskeyChallengeRequest) (*api.PasskeyChallengeResult, error) {
	return call(ctx, a, api.CallChallenge, req, nil)
}

func (a ServiceClient) PasskeyAttested(ctx context.Context, req api.PasskeyAttestedRequest) (*api.PasskeyAttestedResult, error) {
	return call(ctx, a, api.CallPasskeyDecide, req, nil)
}
