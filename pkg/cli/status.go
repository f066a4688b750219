package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
)

// StatusOptions are status's inputs.
type StatusOptions struct {
	F           *Factory
	Fingerprint string
}

// NewCmdStatus builds `status`.
func NewCmdStatus(f *Factory, runF func(*StatusOptions) error) *cobra.Command {
	opts := &StatusOptions{F: f}
	return &cobra.Command{
		Use:   "status FP",
		Short: "Show a plan's evidence and what is missing; exit 0 if run would pass the gate",
		Long: `status recomputes the plan's fingerprint from reality, then shows every piece
of evidence (who, which path, when, expiry, uses, and why it does or does not
count), any veto, and what is still missing. It exits 0 when run would pass
the gate now and 77 when it would not.`,
		Example: "  prod-write status sha256:9f… --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fingerprint = args[0]
			if runF != nil {
				return runF(opts)
			}
			return statusRun(opts)
		},
	}
}

// judge runs rules 2 to 6 of the gate: the fingerprint recomputed from
// reality through d, then [approval.Evaluate] over the stored evidence.
// The decision is returned even when refused, for display.
func (pc *planContext) judge(f *Factory, d operations.Digester, now time.Time) (*approval.Decision, []store.Problem, error) {
	evidence, problems, err := pc.store.Evidence(pc.plan.Fingerprint)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, 0, len(evidence))
	for _, env := range evidence {
		if id, err := approval.ID(env); err == nil {
			ids = append(ids, id)
		}
	}
	used, err := pc.store.Used(ids)
	if err != nil {
		return nil, problems, err
	}
	dec, gateErr := approval.Evaluate(approval.Input{
		Plan: pc.env, Evidence: evidence, Policy: pc.policy, Op: pc.op, Now: now, Used: used,
	})
	if err := pc.reality(f, d); err != nil {
		return dec, problems, err
	}
	return dec, problems, gateErr
}

// reality recomputes the fingerprint from the program, files, cwd and
// environment as they are now (SPEC §3 rule 2).
func (pc *planContext) reality(f *Factory, d operations.Digester) error {
	now, err := pc.op.Resolve(pc.plan.Request(f.LookupEnv), d)
	if err != nil {
		if r, ok := refusal.As(err); ok {
			r.Fingerprint = pc.plan.Fingerprint
			return r
		}
		return fmt.Errorf("recomputing the fingerprint: %w", err)
	}
	if now.Fingerprint == pc.plan.Fingerprint {
		return nil
	}
	return pc.refuse(refusal.FingerprintMismatch, "reality no longer matches the plan: %s", strings.Join(differences(pc.plan, now), "; ")).Needs("a new plan of what is there now")
}

// differences names what changed between two resolutions of a plan,
// without printing any value (a pass variable may still be sensitive).
func differences(was, now *operations.Plan) []string {
	var out []string
	if was.ProgramSHA256 != now.ProgramSHA256 {
		out = append(out, "the program's bytes changed")
	}
	if was.Cwd != now.Cwd {
		out = append(out, "the working directory resolves elsewhere")
	}
	if strings.Join(was.Argv, "\x00") != strings.Join(now.Argv, "\x00") {
		out = append(out, "argv changed")
	}
	files := map[string]operations.File{}
	for _, fl := range now.Files {
		files[fl.Name] = fl
	}
	for _, fl := range was.Files {
		if n := files[fl.Name]; n.SHA256 != fl.SHA256 || n.Size != fl.Size {
			out = append(out, fmt.Sprintf("file %s changed", fl.Name))
		}
	}
	env := map[string]operations.EnvVar{}
	for _, e := range now.Env {
		env[e.Name] = e
	}
	for _, e := range was.Env {
		if n := env[e.Name]; n != e {
			out = append(out, fmt.Sprintf("environment variable %s changed", e.Name))
		}
	}
	if len(out) == 0 {
		out = append(out, "the operation definition changed")
	}
	return out
}

func statusRun(o *StatusOptions) error {
	f := o.F
	pc, err := loadPlan(f, o.Fingerprint)
	if err != nil {
		return err
	}
	d := operations.HashDigester{}
	if f.IO.ErrTTY && !f.JSON {
		d.Progress = progressPrinter(f.IO.Err)
	}
	dec, problems, gateErr := pc.judge(f, callerFiles{d}, f.Now())
	if _, refused := refusal.As(gateErr); gateErr != nil && !refused {
		return gateErr
	}
	if f.JSON {
		out := map[string]any{
			"fingerprint": pc.plan.Fingerprint,
			"operation":   pc.plan.Operation,
			"target":      pc.plan.Target,
			"planner":     pc.plan.Planner,
			"mutating":    pc.plan.Mutating,
			"allowed":     gateErr == nil,
			"evidence":    []*approval.Assessed{},
			"problems":    problems,
		}
		if dec != nil {
			out["evidence"] = dec.Evidence
			out["path"] = dec.Path
		}
		if r, ok := refusal.As(gateErr); ok {
			out["refusal"] = r
		}
		if err := printJSON(f.IO.Out, out); err != nil {
			return err
		}
		return gateErr
	}
	w := f.IO.Out
	printPlan(w, pc.plan)
	if dec != nil {
		for _, a := range dec.Evidence {
			state := "counts"
			if !a.Valid {
				state = "does not count: " + a.Why
			}
			line := fmt.Sprintf("evidence:    %s %s by %s", a.Kind, a.Verdict, a.By)
			if a.Channel != nil {
				line += " via " + a.Channel.Kind
			}
			if !a.Expires.IsZero() {
				line += ", expires " + a.Expires.Format(time.RFC3339)
			}
			if a.Uses > 0 {
				line += fmt.Sprintf(", used %d of %d", a.Used, a.Uses)
			}
			fmt.Fprintf(w, "%s (%.12s…) — %s\n", line, a.ID, state)
		}
	}
	for _, p := range problems {
		fmt.Fprintf(w, "problem:     %s\n", p)
	}
	if gateErr == nil {
		fmt.Fprintf(w, "gate:        open (path %s): run would proceed\n", dec.Path)
		return nil
	}
	r, _ := refusal.As(gateErr)
	fmt.Fprintf(w, "gate:        closed (%s): %s\n", r.Code, r.Reason)
	if len(r.Missing) > 0 {
		fmt.Fprintf(w, "missing:     %s\n", strings.Join(r.Missing, "; "))
	}
	return &ExitError{Code: ExitRefused}
}
