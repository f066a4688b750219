package cli

import (
	"context"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// readThrough is a bridge source's Read through a.
func readThrough(a api.API) func(string) (*bridge.Input, error) {
	return func(fp string) (*bridge.Input, error) {
		ctx, cancel := context.WithTimeout(context.Background(), localapi.BridgeTimeout)
		defer cancel()
		r, err := a.DecisionData(ctx, api.DecisionDataRequest{Fingerprint: fp})
		if err != nil {
			return nil, err
		}
		return r.Input, nil
	}
}

// admitThrough is an attestor's Admit through a: a bridge that is a
// client of the runner service has its answers admitted, and stored, by
// the service.
func admitThrough(a api.API) func(bridge.Request, *approval.Envelope) (*bridge.Result, error) {
	return func(req bridge.Request, env *approval.Envelope) (*bridge.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), localapi.BridgeTimeout)
		defer cancel()
		r, err := a.AnswerAttested(ctx, api.AnswerAttestedRequest{Fingerprint: req.Fingerprint, Record: req.Record, Verdict: req.Verdict,
			Reason: req.Reason, Channel: req.Channel, Issued: req.Issued, Envelope: env})
		if err != nil {
			return nil, err
		}
		return &bridge.Result{ID: r.ID, Approver: r.Approver, Verdict: r.Verdict, Duplicate: r.Duplicate}, nil
	}
}
