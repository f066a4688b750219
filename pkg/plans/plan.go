package plans

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
)

// UsageError is a plan asked in a way the call cannot take (the CLI's
// usage error, exit 64): a dry run of an operation with a precondition, a
// plan to store with no key.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// InputError is the registry's judgement of the invocation's own params
// and files (resolving it): the CLI tells a param_invalid refusal among
// them apart as bad input (exit 65).
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Planned is a plan as plan left it: stored, or only resolved (a dry
// run), with its decision request.
type Planned struct {
	Plan *operations.Plan
	// Stored is false for a dry run.
	Stored bool
	// Request is the decision request of a mutating plan just stored; nil
	// otherwise.
	Request *bridge.DecisionRequest
}

// Result is what the API returns for p, in JSON format formatVersion.
func (p *Planned) Result(formatVersion int) *api.PlanResult {
	return &api.PlanResult{FormatVersion: formatVersion, Plan: p.Plan, Stored: p.Stored, Request: p.Request}
}

// Plan validates and resolves req against the registry, hashing through
// dg, and, when the caller has a key (Deps.Actor), signs the plan as its
// agent and stores it, with its decision request. A plan stored before
// under the same fingerprint is returned as it was first signed.
func Plan(d *Deps, req api.PlanRequest, dg operations.Digester) (*Planned, error) {
	plan, stored, err := plan(d, req, dg)
	if err != nil {
		return nil, err
	}
	dr, err := planRequest(d, plan, stored)
	if err != nil {
		return nil, err
	}
	return &Planned{Plan: plan, Stored: stored, Request: dr}, nil
}

// plan is Plan without the decision request: it reports whether the plan
// was stored.
func plan(d *Deps, o api.PlanRequest, dg operations.Digester) (*operations.Plan, bool, error) {
	rn := d.Runner
	c, err := rn.Config()
	if err != nil {
		return nil, false, err
	}
	reg, err := rn.Registry(c)
	if err != nil {
		return nil, false, err
	}
	// The caller's directory only when the plan binds it: an operation
	// that declares its cwd, given absolute file paths, plans from
	// wherever its caller is (in a mount namespace of its own, say, whose
	// directories stand for no path of the service's).
	var cwd string
	if bindsCallerCwd(reg, o.Operation, o.Files, d.Hosted) {
		if cwd, err = d.Getwd(); err != nil {
			return nil, false, err
		}
	}
	// The policy loads with a key or without one (--dry-run): a dry run
	// that passed where the plan itself fails on a broken trust policy
	// would tell the agent its invocation is fine.
	policy, err := rn.Policy(c)
	if err != nil {
		return nil, false, err
	}
	// With a key, know who plans before hashing anything.
	var actor *approval.Principal
	var signer *keys.Private
	if d.Actor != nil {
		k, pr, err := d.Actor(policy, approval.RoleAgent)
		if err != nil {
			if r, ok := refusal.As(err); ok {
				r.For(o.Operation, "")
			}
			return nil, false, err
		}
		actor, signer = pr, k
	}
	req := operations.Request{
		Operation: o.Operation, Target: o.Target, Params: o.Params, Files: o.Files,
		Cwd: cwd, Getenv: rn.PassEnv, ResolveDir: rn.ResolveDir,
		// MCP over HTTP: every file is supplied inline, none is a path
		// (docs/adr/0039-inline-files-over-mcp-http.md).
		Inline: d.Hosted,
	}
	plan, err := reg.Resolve(req, rn.CallerFiles(dg))
	if err != nil {
		return nil, false, &InputError{err}
	}
	op, _ := reg.Get(o.Operation)
	if o.DryRun {
		if op.Precondition != nil {
			// Its fingerprint binds the check's output, which only a
			// stored plan's check can give (it runs, with receipts).
			return nil, false, &UsageError{Msg: fmt.Sprintf("operation %s has precondition %s, whose output its fingerprint binds: --dry-run runs nothing, so it cannot tell the fingerprint; plan with a key", o.Operation, op.Precondition.Check)}
		}
		return plan, false, nil
	}
	if actor == nil {
		return nil, false, &UsageError{Msg: fmt.Sprintf("plan stores a plan signed with the agent's key, and none was given (--key or PROD_WRITE_KEY); nothing was stored. Fingerprint only: prod-write plan %s … --dry-run", o.Operation)}
	}
	st, err := rn.Store(c)
	if err != nil {
		return nil, false, err
	}
	if op.Precondition != nil {
		// The check runs now and its output is bound.
		if err := bindPrecondition(rn, reg, op, plan, req, signer, actor.ID, st); err != nil {
			return nil, false, err
		}
	}
	plan.Planner = actor.ID
	plan.Created = rn.Now().UTC()
	env, err := approval.Sign(signer, approval.TypePlan, plan)
	if err != nil {
		return nil, false, err
	}
	// Content first: a plan is never stored without the content run
	// takes from the store.
	if err := keepContent(rn, st, plan, op); err != nil {
		return nil, false, err
	}
	err = st.PutPlan(plan.Fingerprint, env)
	if errors.Is(err, store.ErrExists) {
		// The same invocation was planned before: the first signed plan
		// stands, with its planner and time.
		if plan, err = StoredPlan(st, policy, plan.Fingerprint); err != nil {
			return nil, false, err
		}
	} else if err != nil {
		return nil, false, fmt.Errorf("storing plan: %w", err)
	}
	return plan, true, nil
}

// planRequest derives the decision request of a plan just stored.
func planRequest(d *Deps, plan *operations.Plan, stored bool) (*bridge.DecisionRequest, error) {
	if !stored || !plan.Mutating {
		return nil, nil
	}
	rn := d.Runner
	c, err := rn.Config()
	if err != nil {
		return nil, err
	}
	reg, err := rn.Registry(c)
	if err != nil {
		return nil, err
	}
	policy, err := rn.Policy(c)
	if err != nil {
		return nil, err
	}
	st, err := rn.Store(c)
	if err != nil {
		return nil, err
	}
	s, _, err := bridge.RequestSettings(c)
	if err != nil {
		return nil, err
	}
	j, err := bridge.Judge(bridge.Source{Policy: policy, Registry: reg, Store: st}, plan.Fingerprint, rn.Now())
	if err != nil {
		return nil, err
	}
	posts, _ := bridge.LedgerOf(c).Posts(plan.Fingerprint)
	events, _ := bridge.EventsOf(c).List(plan.Fingerprint)
	return j.Request(policy, posts, events, s), nil
}

// StoredPlan reads and verifies the plan stored under fp.
func StoredPlan(st store.Store, policy *approval.Policy, fp string) (*operations.Plan, error) {
	env, err := st.GetPlan(fp)
	if err != nil {
		return nil, err
	}
	plan, _, err := policy.DecodePlan(env)
	if err != nil {
		return nil, fmt.Errorf("the plan already stored for %s does not verify: %w", fp, err)
	}
	return plan, nil
}

// bindsCallerCwd says whether a plan of op with files needs the caller's
// working directory: op declares none, or a file path is relative. Files
// supplied inline (MCP over HTTP) name no path at all. An unknown
// operation needs none (Resolve refuses it).
func bindsCallerCwd(reg *operations.Registry, op string, files map[string]string, inline bool) bool {
	def, ok := reg.Get(op)
	if !ok {
		return false
	}
	if def.Cwd == "" {
		return true
	}
	if inline {
		return false
	}
	for _, path := range files {
		if !filepath.IsAbs(path) {
			return true
		}
	}
	return false
}
