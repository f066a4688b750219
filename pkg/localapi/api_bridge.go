package localapi

import (
	"context"
	"fmt"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
)

// AnswerAttested admits an answer a bridge signed, by the checks the
// bridges run (bridge.Source.Admit), against this process's policy,
// registry, store and clock: in the service, the service's. Any caller
// may ask; what is stored is only what a principal with role bridge
// signed and the checks make.
func (a API) AnswerAttested(_ context.Context, req api.AnswerAttestedRequest) (*api.AnswerAttestedResult, error) {
	src, err := a.bridgeSource()
	if err != nil {
		return nil, err
	}
	r, err := src.Admit(bridgeRequest(req), req.Envelope, a.Env.Now().UTC())
	if err != nil {
		return nil, err
	}
	return &api.AnswerAttestedResult{ID: r.ID, Approver: r.Approver, Verdict: r.Verdict, Duplicate: r.Duplicate}, nil
}

// DecisionData reads what bridge.Judge judges of the plan stored under
// req.Fingerprint (bridge.Gather): through the service, only for a caller
// with a key of the policy (serveAPI), since the plan and its evidence are
// what plans bind.
func (a API) DecisionData(_ context.Context, req api.DecisionDataRequest) (*api.DecisionDataResult, error) {
	src, err := a.bridgeSource()
	if err != nil {
		return nil, err
	}
	in, err := bridge.Gather(src, req.Fingerprint)
	if err != nil {
		return nil, err
	}
	return &api.DecisionDataResult{Input: in}, nil
}

// bridgeSource is this process's policy, registry and store as the
// bridges' checks read them.
func (a API) bridgeSource() (bridge.Source, error) {
	c, err := a.Env.Config()
	if err != nil {
		return bridge.Source{}, err
	}
	p, err := a.Env.Policy(c)
	if err != nil {
		return bridge.Source{}, err
	}
	reg, err := a.Env.Registry(c)
	if err != nil {
		return bridge.Source{}, err
	}
	st, err := a.Env.Store(c)
	if err != nil {
		return bridge.Source{}, err
	}
	return bridge.Source{Policy: p, Registry: reg, Store: st}, nil
}

// bridgeRequest is req as a bridge's checks take it.
func bridgeRequest(req api.AnswerAttestedRequest) bridge.Request {
	return bridge.Request{Fingerprint: req.Fingerprint, Record: req.Record, Verdict: req.Verdict, Reason: req.Reason, Channel: req.Channel, Issued: req.Issued}
}

func (a ServiceClient) AnswerAttested(ctx context.Context, req api.AnswerAttestedRequest) (*api.AnswerAttestedResult, error) {
	return call(ctx, a, api.CallAttested, req, nil)
}

func (a ServiceClient) DecisionData(ctx context.Context, req api.DecisionDataRequest) (*api.DecisionDataResult, error) {
	var r api.DecisionDataResult
	if err := callInto(ctx, a, api.CallDecisionData, req, nil, &r); err != nil {
		return nil, err
	}
	if r.Input == nil {
		return nil, fmt.Errorf("the runner service answered decision-data with no data")
	}
	return &r, nil
}
