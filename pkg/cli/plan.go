package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/visible"
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
				return &localapi.UsageError{Msg: "plan needs --target"}
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
			return nil, &localapi.UsageError{Msg: fmt.Sprintf("%s %q: want NAME=VALUE", flag, kv)}
		}
		if _, dup := out[k]; dup {
			return nil, &localapi.UsageError{Msg: fmt.Sprintf("%s %s given twice", flag, k)}
		}
		out[k] = v
	}
	return out, nil
}

// planRun plans through the API this caller reaches (in-process, or the
// runner service's) and renders the result here, on the caller's side.
func planRun(o *PlanOptions) error {
	f := o.F
	a, err := f.api()
	if err != nil {
		return err
	}
	if la, ok := a.(localapi.API); ok && f.IO.ErrTTY && !f.JSON {
		la.Progress = localapi.ProgressPrinter(f.IO.Err)
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

// printPlan writes the human summary of a plan, fingerprint first.
func printPlan(w io.Writer, p *operations.Plan) {
	mut := "mutating"
	if !p.Mutating {
		mut = "not mutating"
	}
	fmt.Fprintf(w, "fingerprint: %s\n", p.Fingerprint)
	fmt.Fprintf(w, "operation:   %s (%s)\n", p.Operation, mut)
	fmt.Fprintf(w, "target:      %s\n", visible.Word(p.Target))
	fmt.Fprintf(w, "argv:        %s\n", visible.Argv(p.Argv))
	if ip := p.Interpreter; ip != nil {
		fmt.Fprintf(w, "interpreter: %s (%s)\n", visible.Word(ip.Path), ip.SHA256)
	}
	if len(p.Argv) > 0 {
		fmt.Fprintf(w, "runs:        %s\n", runsBy(p.Argv[0]))
	}
	fmt.Fprintf(w, "cwd:         %s\n", visible.Word(p.Cwd))
	for _, fl := range p.Files {
		if _, inline := operations.InlineName(fl.Path); inline {
			fmt.Fprintf(w, "file:        %s, supplied inline over MCP HTTP (%d bytes, %s)\n", visible.Text(fl.Name), fl.Size, fl.SHA256)
			continue
		}
		fmt.Fprintf(w, "file:        %s = %s (%d bytes, %s)\n", visible.Text(fl.Name), visible.Word(fl.Path), fl.Size, fl.SHA256)
	}
	if pc := p.Precondition; pc != nil {
		fmt.Fprintf(w, "precondition: %s (check %s) printed %s\n", visible.Word(pc.Check), pc.CheckFingerprint, pc.OutputSHA256)
		if p.PreconditionOutput != nil {
			fmt.Fprint(w, runner.Indent(visible.Text(*p.PreconditionOutput)))
		}
	}
	for _, e := range p.Env {
		switch e.Kind {
		case operations.EnvSecret:
			fmt.Fprintf(w, "env:         %s (secret: bound by name only)\n", e.Name)
		case operations.EnvUnset:
			fmt.Fprintf(w, "env:         %s (unset)\n", e.Name)
		default:
			fmt.Fprintf(w, "env:         %s=%s\n", e.Name, visible.Word(e.Value))
		}
	}
	if p.Planner != "" {
		fmt.Fprintf(w, "planner:     %s at %s\n", p.Planner, p.Created.Format("2006-01-02T15:04:05Z"))
	}
}
