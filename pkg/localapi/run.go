package localapi

import (
	"errors"
	"os"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/plans"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// RunnerIdentity is this host's signing identity for receipts (in the
// service: the runner key it loaded).
func (f *Env) RunnerIdentity(c *config.Config, p *approval.Policy) (*keys.Private, *approval.Principal, error) {
	if f.Call != nil {
		st := f.Call.State.Current()
		return st.RunnerKey, st.Runner, st.RunnerErr
	}
	return runner.LoadIdentity(c, p)
}

// Runner is the run order and plan context (pkg/Runner) as f's caller has
// them: in local mode this process's configuration, environment and
// stdio; in the service the call's descriptors and the service's own
// policy, credentials and run_as accounts.
func (f *Env) Runner() *runner.Runner {
	r := &runner.Runner{
		Now:                f.Now,
		Config:             f.Config,
		Registry:           f.Registry,
		Policy:             f.Policy,
		Store:              f.Store,
		ResolveFingerprint: f.ResolveFingerprint,
		Identity:           f.RunnerIdentity,
		PassEnv:            f.PassEnv,
		ResolveDir:         f.ResolveDir,
		LookupEnv:          f.LookupEnv,
		JournalSync:        f.JournalSync,
		Invoker:            func(p *approval.Policy) receipts.Invoker { return Invoker(f, p) },
		StartDecision: func(asked string) (runner.DecisionLog, error) {
			d, err := f.StartDecision(asked)
			if err != nil {
				return nil, err
			}
			return d, nil
		},
		Ship:           f.shipReceipts,
		WarnUnnotified: f.warnUnnotified,
	}
	if f.IO != nil {
		r.Stdin, r.Stdout, r.Stderr = f.IO.In, f.IO.Out, f.IO.Err
		if f.IO.ErrTTY && !f.JSON {
			r.Progress = ProgressPrinter(f.IO.Err)
		}
	}
	if sc := f.Call; sc != nil {
		r.PolicyShared = true
		r.CallerCwd = sc.Getwd
		r.OpenFile = sc.File
		r.Inline = f.inlineFile
		r.Secret = sc.State.Secret
		r.SecretReadable = sc.State.SecretReadable
		r.Credential = sc.Credential
		r.Account = sc.Account
		r.Prepare = sc.Prepare
		r.Snapshots = &sc.State.Snapshots
		r.FinishOutput = sc.FinishOutput
		r.Signals = func() <-chan os.Signal {
			if sc.Socket != nil {
				return sc.Socket.Signals()
			}
			return nil // MCP over HTTP: no client to relay any
		}
	}
	return r
}

// Plans is what the calls on Plans (pkg/Plans) depend on, as f's
// caller has it; but for the key, which only planning asks for
// (localAPI.Plan).
func (f *Env) Plans() *plans.Deps {
	return &plans.Deps{Runner: f.Runner(), Reloaded: f.PolicyReplaced, Getwd: f.Getwd, Hosted: f.Call != nil && f.Call.Hosted}
}

// Invoker is who asked for the run: the account (in the service, the
// kernel's SO_PEERCRED, not anything the client says) and the principal of
// the key it presented, if any.
func Invoker(f *Env, p *approval.Policy) receipts.Invoker {
	inv := receipts.Invoker{UID: os.Getuid()}
	if f.Call != nil {
		inv.UID = -1 // MCP over HTTP: a token, no account
		if f.Call.Socket != nil {
			inv.UID = int(f.Call.Socket.Peer.UID)
		}
	}
	if f.HasKey() {
		if k, _, err := f.LoadKey(); err == nil {
			if pr, ok := p.ByKey(k.Public().ID()); ok {
				inv.Principal = pr.ID
			}
		}
	}
	return inv
}

// inlineFile is file parameter name of a plan that binds it as supplied
// inline (MCP over HTTP) with sum: the content this call supplied, or else
// the content kept with the plan, checked against sum (the store is not
// trusted) and copied into a sealed memfd of this call's own
// (docs/adr/0063-file-content-kept-with-the-plan.md).
func (f *Env) inlineFile(name, sum string) (*os.File, bool, error) {
	if fl, ok := f.Call.Inline[name]; ok {
		return fl, false, nil
	}
	again := "file " + name + ": the same content, supplied inline (files." + name + ")"
	if sum == "" {
		return nil, false, refusal.New(refusal.ParamInvalid, "file %s: no content was supplied inline", name).Needs(again)
	}
	c, err := f.Config()
	if err != nil {
		return nil, false, err
	}
	st, err := f.Store(c)
	if err != nil {
		return nil, false, err
	}
	data, err := st.Content(sum)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, refusal.New(refusal.ParamInvalid, "file %s was supplied inline, and the store keeps no content of it: supply the same content again", name).Needs(again)
	}
	if err != nil {
		return nil, false, err
	}
	if store.SumOf(data) != sum {
		return nil, false, refusal.New(refusal.FingerprintMismatch, "the content the store keeps for file %s is not the content the plan binds", name).Needs(again)
	}
	fl, err := execute.SealedBytes(name, data)
	if err != nil {
		return nil, false, err
	}
	return fl, true, nil
}
