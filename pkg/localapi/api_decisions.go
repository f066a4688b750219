package localapi

import (
	"context"
	"fmt"
	"slices"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
)

// The calls that add a signed record to a plan: file, decide, gera and
// withdraw, in-process and through the runner service. Each signs with the
// caller's key: in the service, the key the client handed over, so a
// caller with no key of the policy is refused by the key lookup
// (Env.Actor), which names nothing of the plan but its operation and
// fingerprint. The requests are checked here as well as by the command
// line: the service takes them from any client.

func (a API) File(_ context.Context, req api.FileRequest) (*api.FileResult, error) {
	for _, v := range []struct{ flag, text string }{{"--summary", req.Summary}, {"--effect", req.Effect}, {"--blast-radius", req.BlastRadius}, {"--rollback", req.Rollback}} {
		if v.text == "" {
			return nil, &UsageError{Msg: "file needs " + v.flag}
		}
	}
	if !slices.Contains(approval.CertaintyLevels, req.Certainty) {
		return nil, &UsageError{Msg: "--certainty must be high, medium or low"}
	}
	f := a.Env
	f.PostsDecisions = true // posting needs prod-write-net
	pc, err := loadPlan(f, req.Fingerprint)
	if err != nil {
		return nil, err
	}
	k, pr, err := pc.actor(f, approval.RoleOperator, false)
	if err != nil {
		return nil, err
	}
	// No decision is posted for a plan that could never run: no one is
	// asked to approve what run would refuse anyway.
	if err := pc.Runnable(f.Runner()); err != nil {
		return nil, err
	}
	now := f.Now().UTC()
	id, rec, err := pc.File(k, pr, approval.CertaintyRecord{Summary: req.Summary, Effect: req.Effect, BlastRadius: req.BlastRadius, Rollback: req.Rollback, Certainty: req.Certainty}, now, req.TTL)
	if err != nil {
		return nil, err
	}
	notifyFiled(f, pc, id)
	return &api.FileResult{
		Written:   api.Written{FormatVersion: FormatVersion, Kind: approval.KindRecord, ID: id, Actor: pr.ID, Fingerprint: pc.Plan.Fingerprint, Verdict: "record", Issued: now, Expires: rec.Expires},
		Certainty: rec.Certainty,
		Plan:      pc.Plan,
	}, nil
}

func (a API) Decide(_ context.Context, req api.DecideRequest) (*api.DecideResult, error) {
	if req.Answer != approval.Approve && req.Answer != approval.Deny {
		return nil, &UsageError{Msg: fmt.Sprintf("answer %q: want approve or deny", req.Answer)}
	}
	f := a.Env
	pc, err := loadPlan(f, req.Fingerprint)
	if err != nil {
		return nil, err
	}
	k, pr, err := pc.actor(f, approval.RoleApprover, req.Answer == approval.Deny)
	if err != nil {
		return nil, err
	}
	now := f.Now().UTC()
	id, ans, rec, err := pc.Decide(k, pr, req.Answer, req.Reason, req.Record, now, req.TTL)
	if err != nil {
		return nil, err
	}
	return &api.DecideResult{
		Written:  api.Written{FormatVersion: FormatVersion, Kind: approval.KindAnswer, ID: id, Actor: pr.ID, Fingerprint: pc.Plan.Fingerprint, Verdict: ans.Answer, Record: ans.Record, Issued: now, Expires: ans.Expires},
		Answered: rec,
		Plan:     pc.Plan,
	}, nil
}

func (a API) Gera(_ context.Context, req api.GeraRequest) (*api.GeraResult, error) {
	if req.Decision != approval.Go && req.Decision != approval.NoGo {
		return nil, &UsageError{Msg: fmt.Sprintf("decision %q: want go or no-go", req.Decision)}
	}
	if req.Decision == approval.Go && req.Uses < 1 {
		return nil, &UsageError{Msg: "--uses must be at least 1"}
	}
	f := a.Env
	pc, err := loadPlan(f, req.Fingerprint)
	if err != nil {
		return nil, err
	}
	k, pr, err := pc.actor(f, approval.RoleGera, req.Decision == approval.NoGo)
	if err != nil {
		return nil, err
	}
	now := f.Now().UTC()
	id, g, err := pc.Gera(k, pr, req.Decision, req.Uses, req.Reason, now, req.TTL)
	if err != nil {
		return nil, err
	}
	uses := g.Uses
	return &api.GeraResult{Written: api.Written{FormatVersion: FormatVersion, Kind: approval.KindGera, ID: id, Actor: pr.ID, Fingerprint: pc.Plan.Fingerprint, Verdict: g.Decision, Uses: &uses, Issued: now, Expires: g.Expires}}, nil
}

func (a API) Withdraw(_ context.Context, req api.WithdrawRequest) (*api.WithdrawResult, error) {
	f := a.Env
	f.PostsDecisions = true // posting needs prod-write-net
	pc, err := loadPlan(f, req.Fingerprint)
	if err != nil {
		return nil, err
	}
	// No role: only the planner may, which Withdraw checks.
	k, pr, err := f.Actor(pc.Policy, "")
	if err != nil {
		return nil, err
	}
	id, w, err := pc.Withdraw(k, pr, f.Now().UTC())
	if err != nil {
		return nil, err
	}
	notifyWithdrawn(f, pc)
	return &api.WithdrawResult{Written: api.Written{FormatVersion: FormatVersion, Kind: approval.KindWithdrawal, ID: id, Actor: pr.ID, Fingerprint: pc.Plan.Fingerprint, Verdict: "withdraw", Issued: w.Issued}}, nil
}

func (a ServiceClient) File(ctx context.Context, req api.FileRequest) (*api.FileResult, error) {
	return call(ctx, a, api.CallFile, req, nil)
}

func (a ServiceClient) Decide(ctx context.Context, req api.DecideRequest) (*api.DecideResult, error) {
	return call(ctx, a, api.CallDecide, req, nil)
}

func (a ServiceClient) Gera(ctx context.Context, req api.GeraRequest) (*api.GeraResult, error) {
	return call(ctx, a, api.CallGera, req, nil)
}

func (a ServiceClient) Withdraw(ctx context.Context, req api.WithdrawRequest) (*api.WithdrawResult, error) {
	return call(ctx, a, api.CallWithdraw, req, nil)
}
