package cli

import (
	"context"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
)

// AnswerAttested admits an answer a bridge signed, by the checks the
// bridges run (bridge.Source.Admit), against this process's policy,
// registry, store and clock: in the service, the service's. Any caller
// may ask; what is stored is only what a principal with role bridge
// signed and the checks make.
func (a localAPI) AnswerAttested(_ context.Context, req api.AnswerAttestedRequest) (*api.AnswerAttestedResult, error) {
	c, err := a.f.Config()
	if err != nil {
		return nil, err
	}
	p, err := a.f.Policy(c)
	if err != nil {
		return nil, err
	}
	reg, err := a.f.Registry(c)
	if err != nil {
		return nil, err
	}
	st, err := a.f.Store(c)
	if err != nil {
		return nil, err
	}
	src := bridge.Source{Policy: p, Registry: reg, Store: st}
	r, err := src.Admit(bridgeRequest(req), req.Envelope, a.f.Now().UTC())
	if err != nil {
		return nil, err
	}
	return &api.AnswerAttestedResult{ID: r.ID, Approver: r.Approver, Verdict: r.Verdict, Duplicate: r.Duplicate}, nil
}

func (a serviceAPI) AnswerAttested(ctx context.Context, req api.AnswerAttestedRequest) (*api.AnswerAttestedResult, error) {
	var r api.AnswerAttestedResult
	if err := a.call(ctx, "answer-attested", &req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// bridgeRequest is req as a bridge's checks take it.
func bridgeRequest(req api.AnswerAttestedRequest) bridge.Request {
	return bridge.Request{Fingerprint: req.Fingerprint, Record: req.Record, Verdict: req.Verdict, Reason: req.Reason, Channel: req.Channel, Issued: req.Issued}
}

// admitThrough is an attestor's Admit through a: a bridge that is a
// client of the runner service has its answers admitted, and stored, by
// the service.
func admitThrough(a api.API) func(bridge.Request, *approval.Envelope) (*bridge.Result, error) {
	return func(req bridge.Request, env *approval.Envelope) (*bridge.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), bridgeTimeout)
		defer cancel()
		r, err := a.AnswerAttested(ctx, api.AnswerAttestedRequest{Fingerprint: req.Fingerprint, Record: req.Record, Verdict: req.Verdict,
			Reason: req.Reason, Channel: req.Channel, Issued: req.Issued, Envelope: env})
		if err != nil {
			return nil, err
		}
		return &bridge.Result{ID: r.ID, Approver: r.Approver, Verdict: r.Verdict, Duplicate: r.Duplicate}, nil
	}
}
