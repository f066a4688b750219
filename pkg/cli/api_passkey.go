package cli

import (
	"context"

	"github.com/prod-write/prod-write/pkg/api"
)

// Passkey enrolment, in-process and through the runner service
// (docs/adr/0043-passkey-assertions-as-evidence.md). What the caller
// hands over (a principal's name, a code, a registration response) is a
// stranger's input to the service: passkeyenroll checks a code's form
// before hashing it, names files only by hashes, and verifies the
// response with go-webauthn against a challenge it issued, once.

func (a serviceAPI) PasskeyCode(ctx context.Context, req api.PasskeyCodeRequest) (*api.PasskeyCodeResult, error) {
	var r api.PasskeyCodeResult
	if err := a.call(ctx, "passkey-code", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a serviceAPI) PasskeyEnrollBegin(ctx context.Context, req api.PasskeyEnrollBeginRequest) (*api.PasskeyEnrollBeginResult, error) {
	var r api.PasskeyEnrollBeginResult
	if err := a.call(ctx, "passkey-enroll-begin", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a serviceAPI) PasskeyEnrollFinish(ctx context.Context, req api.PasskeyEnrollFinishRequest) (*api.PasskeyEnrollFinishResult, error) {
	var r api.PasskeyEnrollFinishResult
	if err := a.call(ctx, "passkey-enroll-finish", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// The approval page's calls (docs/adr/0048-approval-page.md). The page's
// server is a bridge: it asks for a statement with its bridge key, and
// hands back the approver's assertion in a decision it signed with that
// key. What it sends is a stranger's input all the same: the service
// compares the statement with the one it issued, spends the nonce once,
// and stores the decision only when the gate verifies it.

func (a serviceAPI) PasskeyChallenge(ctx context.Context, req api.PasskeyChallengeRequest) (*api.PasskeyChallengeResult, error) {
	var r api.PasskeyChallengeResult
	if err := a.call(ctx, "passkey-challenge", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (a serviceAPI) PasskeyAttested(ctx context.Context, req api.PasskeyAttestedRequest) (*api.PasskeyAttestedResult, error) {
	var r api.PasskeyAttestedResult
	if err := a.call(ctx, "passkey-attested", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
