package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// PlanOptions are plan's inputs.
type PlanOptions struct {
	F         *Factory `json:"-"`
	Operation string
	Target    string
	Params    map[string]string
	Files     map[string]string
	// DryRun resolves and fingerprints without a key and stores nothing.
	DryRun bool
}

// NewCmdPlan builds `plan`.
func NewCmdPlan(f *Factory, runF func(*PlanOptions) error) *cobra.Command {
	opts := &PlanOptions{F: f}
	var params, files []string
	cmd := &cobra.Command{
		Use:   "plan OP --target T [--param k=v]... [--file k=path]...",
		Short: "Resolve and fingerprint an operation, and store the signed plan",
		Long: `plan validates an invocation of a registry operation, resolves its program on
the secure path, hashes the program and every file parameter, and prints the
fingerprint that approvals must name, then stores the plan signed with the
agent's key (--key or PROD_WRITE_KEY, role agent). Without a key it refuses
(exit 64), unless --dry-run says that nothing should be stored: a plan nobody
signed cannot be approved, and an agent that forgot its key must not believe
it asked.

A param or file that breaks its declared rules is refused (param_invalid)
with exit 65, bad input: no approval would allow it. --dry-run loads the
trust policy as plan does, and fails on a broken one.`,
		Example: `  prod-write plan config-push --target staging --param service=api \
      --file config=./api.toml --key keys/agent.key`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Operation = args[0]
			var err error
			if opts.Params, err = pairs("--param", params); err != nil {
				return err
			}
			if opts.Files, err = pairs("--file", files); err != nil {
				return err
			}
			if opts.Target == "" {
				return &usageError{msg: "plan needs --target"}
			}
			if runF != nil {
				return runF(opts)
			}
			return planRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Target, "target", "", "the target environment")
	cmd.Flags().StringArrayVar(&params, "param", nil, "a parameter, `NAME=VALUE` (repeatable)")
	cmd.Flags().StringArrayVar(&files, "file", nil, "a file parameter, `NAME=PATH` (repeatable)")
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "resolve and print the fingerprint, store nothing (no key needed)")
	return cmd
}

// pairs parses NAME=VALUE flags; a name given twice is a usage error.
func pairs(flag string, in []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range in {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, &usageError{msg: fmt.Sprintf("%s %q: want NAME=VALUE", flag, kv)}
		}
		if _, dup := out[k]; dup {
			return nil, &usageError{msg: fmt.Sprintf("%s %s given twice", flag, k)}
		}
		out[k] = v
	}
	return out, nil
}

// planRequest derives the decision request of a plan just stored.
func planRequest(f *Factory, plan *operations.Plan, stored bool) (*bridge.DecisionRequest, error) {
	if !stored || !plan.Mutating {
		return nil, nil
	}
	c, err := f.Config()
	if err != nil {
		return nil, err
	}
	reg, err := f.Registry(c)
	if err != nil {
		return nil, err
	}
	policy, err := f.Policy(c)
	if err != nil {
		return nil, err
	}
	st, err := f.Store(c)
	if err != nil {
		return nil, err
	}
	s, _, err := bridge.RequestSettings(c)
	if err != nil {
		return nil, err
	}
	j, err := bridge.Judge(bridge.Source{Policy: policy, Registry: reg, Store: st}, plan.Fingerprint, f.Now())
	if err != nil {
		return nil, err
	}
	posts, _ := bridge.LedgerOf(c).Posts(plan.Fingerprint)
	events, _ := bridge.EventsOf(c).List(plan.Fingerprint)
	return j.Request(policy, posts, events, s), nil
}

// planRun plans through the API this caller reaches (in-process, or the
// runner service's) and renders the result here, on the caller's side.
func planRun(o *PlanOptions) error {
	f := o.F
	a, err := f.api()
	if err != nil {
		return err
	}
	if la, ok := a.(localAPI); ok && f.IO.ErrTTY && !f.JSON {
		la.progress = progressPrinter(f.IO.Err)
		a = la
	}
	r, err := a.Plan(context.Background(), api.PlanRequest{Operation: o.Operation, Target: o.Target, Params: o.Params, Files: o.Files, DryRun: o.DryRun})
	if err != nil {
		return err
	}
	return printPlanResult(f, r)
}

// printPlanResult renders a plan as text, or as `plan --json`.
func printPlanResult(f *Factory, r *api.PlanResult) error {
	plan, stored, req := r.Plan, r.Stored, r.Request
	if f.JSON {
		return printJSON(f.IO.Out, r)
	}
	printPlan(f.IO.Out, plan)
	if stored {
		fmt.Fprintf(f.IO.Out, "stored:      signed by %s\n", plan.Planner)
		if req != nil {
			fmt.Fprintf(f.IO.Out, "request:     %s: %s\n", req.ID, req.Sentence())
			for _, a := range req.Asked {
				fmt.Fprintf(f.IO.Out, "asked:       %s\n", askedWords(a))
			}
			fmt.Fprintf(f.IO.Out, "wait:        prod-write status %s --wait\n", plan.Fingerprint)
		}
	} else {
		fmt.Fprintf(f.IO.Out, "stored:      no (--dry-run)\n")
	}
	return nil
}

// planCore is plan without output, shared by the CLI and the MCP plan
// tools: it validates and resolves o against the registry, hashing through
// d, and, when there is a key, signs the plan as its agent and stores it.
// It reports whether the plan was stored; a plan stored before under the
// same fingerprint is returned as it was first signed.
func planCore(o *PlanOptions, d operations.Digester) (*operations.Plan, bool, error) {
	f := o.F
	c, err := f.Config()
	if err != nil {
		return nil, false, err
	}
	reg, err := f.Registry(c)
	if err != nil {
		return nil, false, err
	}
	// The caller's directory only when the plan binds it: an operation
	// that declares its cwd, given absolute file paths, plans from
	// wherever its caller is (in a mount namespace of its own, say, whose
	// directories stand for no path of the service's).
	var cwd string
	if bindsCallerCwd(reg, o.Operation, o.Files, f.call != nil && f.call.hosted) {
		if cwd, err = f.Getwd(); err != nil {
			return nil, false, err
		}
	}
	// The policy loads with a key or without one (--dry-run): a dry run
	// that passed where the plan itself fails on a broken trust policy
	// would tell the agent its invocation is fine (issue 29).
	policy, err := f.Policy(c)
	if err != nil {
		return nil, false, err
	}
	// With a key, know who plans before hashing anything.
	var actor *approval.Principal
	var signer *keys.Private
	if f.hasKey() {
		k, pr, err := f.Actor(policy, approval.RoleAgent)
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
		Cwd: cwd, Getenv: f.passEnv, ResolveDir: f.resolveDir,
		// MCP over HTTP: every file is supplied inline, none is a path
		// (docs/adr/0039-inline-files-over-mcp-http.md).
		Inline: f.call != nil && f.call.hosted,
	}
	plan, err := reg.Resolve(req, f.callerFiles(d))
	if err != nil {
		return nil, false, planInput(err)
	}
	op, _ := reg.Get(o.Operation)
	if o.DryRun {
		if op.Precondition != nil {
			// Its fingerprint binds the check's output, which only a
			// stored plan's check can give (it runs, with receipts).
			return nil, false, &usageError{msg: fmt.Sprintf("operation %s has precondition %s, whose output its fingerprint binds: --dry-run runs nothing, so it cannot tell the fingerprint; plan with a key", o.Operation, op.Precondition.Check)}
		}
		return plan, false, nil
	}
	if actor == nil {
		return nil, false, &usageError{msg: fmt.Sprintf("plan stores a plan signed with the agent's key, and none was given (--key or PROD_WRITE_KEY); nothing was stored. Fingerprint only: prod-write plan %s … --dry-run", o.Operation)}
	}
	st, err := f.Store(c)
	if err != nil {
		return nil, false, err
	}
	if op.Precondition != nil {
		// The check runs now and its output is bound (issue 22).
		if err := bindPrecondition(f, reg, op, plan, req, signer, actor.ID, st); err != nil {
			return nil, false, err
		}
	}
	plan.Planner = actor.ID
	plan.Created = f.Now().UTC()
	env, err := approval.Sign(signer, approval.TypePlan, plan)
	if err != nil {
		return nil, false, err
	}
	err = st.PutPlan(plan.Fingerprint, env)
	if errors.Is(err, store.ErrExists) {
		// The same invocation was planned before: the first signed plan
		// stands, with its planner and time.
		if plan, err = storedPlan(st, policy, plan.Fingerprint); err != nil {
			return nil, false, err
		}
	} else if err != nil {
		return nil, false, fmt.Errorf("storing plan: %w", err)
	}
	return plan, true, nil
}

// storedPlan reads and verifies the plan stored under fp.
func storedPlan(st store.Store, policy *approval.Policy, fp string) (*operations.Plan, error) {
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

// printPlan writes the human summary of a plan, fingerprint first.
func printPlan(w io.Writer, p *operations.Plan) {
	mut := "mutating"
	if !p.Mutating {
		mut = "not mutating"
	}
	fmt.Fprintf(w, "fingerprint: %s\n", p.Fingerprint)
	fmt.Fprintf(w, "operation:   %s (%s)\n", p.Operation, mut)
	fmt.Fprintf(w, "target:      %s\n", p.Target)
	fmt.Fprintf(w, "argv:        %s\n", quoteArgv(p.Argv))
	fmt.Fprintf(w, "cwd:         %s\n", p.Cwd)
	for _, fl := range p.Files {
		if _, inline := operations.InlineName(fl.Path); inline {
			fmt.Fprintf(w, "file:        %s, supplied inline over MCP HTTP (%d bytes, %s)\n", fl.Name, fl.Size, fl.SHA256)
			continue
		}
		fmt.Fprintf(w, "file:        %s = %s (%d bytes, %s)\n", fl.Name, fl.Path, fl.Size, fl.SHA256)
	}
	if pc := p.Precondition; pc != nil {
		fmt.Fprintf(w, "precondition: %s (check %s) printed %s\n", pc.Check, pc.CheckFingerprint, pc.OutputSHA256)
		if p.PreconditionOutput != nil {
			fmt.Fprint(w, runner.Indent(*p.PreconditionOutput))
		}
	}
	for _, e := range p.Env {
		switch e.Kind {
		case operations.EnvSecret:
			fmt.Fprintf(w, "env:         %s (secret: bound by name only)\n", e.Name)
		case operations.EnvUnset:
			fmt.Fprintf(w, "env:         %s (unset)\n", e.Name)
		default:
			fmt.Fprintf(w, "env:         %s=%s\n", e.Name, e.Value)
		}
	}
	if p.Planner != "" {
		fmt.Fprintf(w, "planner:     %s at %s\n", p.Planner, p.Created.Format("2006-01-02T15:04:05Z"))
	}
}

// quoteArgv shows argv unambiguously: an element with anything but safe
// characters is quoted Go-style, so control bytes and spaces are visible.
func quoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@{}%") == "" {
			out[i] = a
		} else {
			out[i] = fmt.Sprintf("%q", a)
		}
	}
	return strings.Join(out, " ")
}

func progressPrinter(w io.Writer) func(string, int64, int64) {
	return func(name string, done, total int64) {
		pct := int64(100)
		if total > 0 {
			pct = done * 100 / total
		}
		fmt.Fprintf(w, "\rhashing %s: %d/%d MiB (%d%%)", name, done>>20, total>>20, pct)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
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
