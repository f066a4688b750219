package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// StatusOptions are status's inputs.
type StatusOptions struct {
	F           *Factory `json:"-"`
	Fingerprint string
	// Wait blocks until the plan's decision request is decided, withdrawn
	// or expired, or Timeout (a Go duration; "" for none) passes.
	Wait    bool
	Timeout string
}

// NewCmdStatus builds `status`.
func NewCmdStatus(f *Factory, runF func(*StatusOptions) error) *cobra.Command {
	opts := &StatusOptions{F: f}
	cmd := &cobra.Command{
		Use:   "status FP [--wait [--timeout D]]",
		Short: "Show a plan's evidence and what is missing; exit 0 if run would pass the gate",
		Long: `status recomputes the plan's fingerprint from reality, then shows every piece
of evidence (who, which path, when, expiry, uses, and why it does or does not
count), any veto, what is still missing, and the plan's decision request (who
was asked, where, until when). It exits 0 when run would pass the gate now and
77 when it would not.

With --wait it blocks until the request is decided: exit 0 when the gate
opens; 77 when a veto lands, the plan is withdrawn or the request expires
(a denial's reason is shown verbatim); 124 when --timeout passes first. It
wakes on changes to the store (inotify on the embedded store, a polling
backoff on DynamoDB), never in a busy loop (docs/JSON.md, "status --wait").`,
		Example: "  prod-write status sha256:9f… --json\n  prod-write status sha256:9f… --wait --timeout 30m",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fingerprint = args[0]
			if runF != nil {
				return runF(opts)
			}
			if opts.Wait {
				return statusWait(opts)
			}
			if opts.Timeout != "" {
				return &usageError{msg: "--timeout goes with --wait"}
			}
			return statusShow(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Wait, "wait", false, "block until the decision lands (0), is denied, withdrawn or expires (77), or --timeout passes (124)")
	cmd.Flags().StringVar(&opts.Timeout, "timeout", "", "with --wait: give up after this long (Go duration, e.g. 10m)")
	return cmd
}

// judge runs rules 2 to 6 of the gate: the fingerprint recomputed from
// reality through d (file parameters read as f's caller has them), then
// [approval.Evaluate] over the stored evidence.
// The decision is returned even when refused, for display.
func (pc *planContext) judge(f *Factory, d operations.Digester, now time.Time) (*approval.Decision, []store.Problem, error) {
	evidence, problems, err := pc.Store.Evidence(pc.Plan.Fingerprint)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, 0, len(evidence))
	for _, env := range evidence {
		if id, err := approval.ID(env); err == nil {
			ids = append(ids, id)
		}
	}
	used, err := pc.Store.Used(ids)
	if err != nil {
		return nil, problems, err
	}
	// The break-glass history, as run reads it (issue 22).
	hist, histProblems, err := runner.BreakGlassHistory(pc.Store, pc.Policy, pc.Plan.Fingerprint, evidence)
	if err != nil {
		return nil, problems, err
	}
	dec, gateErr := approval.Evaluate(approval.Input{
		Plan: pc.Envelope, Evidence: evidence, Unreadable: append(runner.ProblemStrings(problems), histProblems...), Policy: pc.Policy, Op: pc.Op, Now: now, Used: used, BreakGlass: hist,
		// status does not run the precondition check; run does (issue 22).
		PreconditionUnchecked: true,
	})
	if err := pc.Reality(f.runner(), d); err != nil {
		return dec, problems, err
	}
	return dec, problems, gateErr
}

// statusReport is what status knows about a stored plan: the CLI prints
// it, the MCP status tool returns it.
type statusReport struct {
	Plan *operations.Plan
	// Decision is the gate's, with every piece of evidence assessed; nil
	// when the plan itself could not be judged.
	Decision *approval.Decision
	Problems []store.Problem
	// Refusal says why run would not pass the gate now; nil when it would.
	Refusal *refusal.Error
	// Request is the plan's decision request; nil when it needs none.
	Request *bridge.DecisionRequest
	gateErr error
	// policyDigest and op are what the gate judged by, for explain.
	policyDigest string
	op           *operations.Operation
	now          time.Time
}

// explain answers "why would this be allowed?" before a run (issue 20).
func (s *statusReport) explain() *approval.Explanation {
	return approval.ExplainDecision(s.Decision, s.op, s.policyDigest, len(s.Problems), s.Refusal, s.now)
}

// statusCore judges the plan stored under fp as run would now, hashing
// through d. A gate that says no is not an error here: it is the report's
// Refusal. The error is for a plan that cannot be loaded or judged at all.
func statusCore(f *Factory, fp string, d operations.Digester) (*statusReport, error) {
	pc, err := loadPlan(f, fp)
	if err != nil {
		return nil, err
	}
	now := f.Now()
	dec, problems, gateErr := pc.judge(f, d, now)
	r, refused := refusal.As(gateErr)
	if gateErr != nil && !refused {
		return nil, gateErr
	}
	req, err := pc.requestOf(dec, r, now)
	if err != nil {
		return nil, err
	}
	return &statusReport{Plan: pc.Plan, Decision: dec, Problems: problems, Refusal: r, Request: req, gateErr: gateErr, policyDigest: pc.Policy.Digest, op: pc.Op, now: now}, nil
}

// result is the report as the API returns it (`status --json` prints it,
// the MCP status tool returns it).
func (s *statusReport) result() *api.StatusResult {
	r := &api.StatusResult{
		Fingerprint:   s.Plan.Fingerprint,
		Operation:     s.Plan.Operation,
		Target:        s.Plan.Target,
		Planner:       s.Plan.Planner,
		Mutating:      s.Plan.Mutating,
		Allowed:       s.gateErr == nil,
		Evidence:      []*approval.Assessed{},
		Problems:      nonNil(s.Problems),
		FormatVersion: FormatVersion,
		Plan:          s.Plan,
		// What the approver approves the world as (issue 22); status
		// does not run the check, run does.
		Precondition: s.Plan.Precondition,
		Refusal:      s.Refusal,
		Explanation:  s.explain(),
		Request:      s.Request,
	}
	if s.Decision != nil {
		r.Evidence = nonNil(s.Decision.Evidence)
		r.Path = operations.PathName(s.Decision.Path)
		r.PreconditionUnchecked = s.Decision.PreconditionUnchecked
	}
	return r
}

// statusShow is status without --wait: the API's result (in-process, or
// the runner service's), rendered here, on the caller's side.
func statusShow(o *StatusOptions) error {
	f := o.F
	a, err := f.api()
	if err != nil {
		return err
	}
	if la, ok := a.(localAPI); ok && f.IO.ErrTTY && !f.JSON {
		la.progress = progressPrinter(f.IO.Err)
		a = la
	}
	r, err := a.Status(context.Background(), api.StatusRequest{Fingerprint: o.Fingerprint})
	if err != nil {
		return err
	}
	return printStatus(f, r)
}

// printStatus prints the report; its error is the exit status.
func printStatus(f *Factory, s *api.StatusResult) error {
	if f.JSON {
		if err := printJSON(f.IO.Out, s); err != nil {
			return err
		}
		if s.Refusal != nil {
			return s.Refusal
		}
		return nil
	}
	w := f.IO.Out
	if s.Plan != nil {
		printPlan(w, s.Plan)
	} else {
		fmt.Fprintf(w, "fingerprint: %s\noperation:   %s\ntarget:      %s\n", s.Fingerprint, s.Operation, s.Target)
		fmt.Fprintf(w, "redacted:    what the plan binds is shown only to a caller with a key of the trust policy\n")
	}
	{
		for _, a := range s.Evidence {
			state := "counts"
			if !a.Valid {
				state = "does not count: " + a.Why
			}
			line := fmt.Sprintf("evidence:    %s by %s", evidenceWords(a), a.By)
			if a.Channel != nil {
				line += " via " + channelEvidence(a.Channel)
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
	if s.PreconditionUnchecked {
		fmt.Fprintf(w, "precondition: not run by status; run runs the check again before consuming anything\n")
	}
	for _, p := range s.Problems {
		fmt.Fprintf(w, "problem:     %s\n", p)
	}
	fmt.Fprintf(w, "why:         %s\n", s.Explanation.Sentence)
	if rq := s.Request; rq != nil {
		fmt.Fprintf(w, "request:     %s: %s\n", rq.ID, rq.Sentence())
		for _, a := range rq.Asked {
			fmt.Fprintf(w, "asked:       %s\n", askedWords(a))
		}
		for _, e := range rq.Events {
			fmt.Fprintf(w, "event:       %s at %s (%s)\n", e.Kind, e.At.Format(time.RFC3339), e.Where)
		}
	}
	if s.Refusal == nil {
		fmt.Fprintf(w, "gate:        open (path %s): run would proceed\n", s.Path)
		return nil
	}
	r := s.Refusal
	fmt.Fprintf(w, "gate:        closed (%s): %s\n", r.Code, r.Reason)
	if len(r.Missing) > 0 {
		fmt.Fprintf(w, "missing:     %s\n", strings.Join(r.Missing, "; "))
	}
	return &ExitError{Code: ExitRefused}
}

// evidenceWords names a piece of evidence for people: "certainty record",
// "approve", "deny", "gera go", "gera no-go", "withdrawal".
func evidenceWords(a *approval.Assessed) string {
	switch a.Kind {
	case approval.KindRecord:
		return "certainty record"
	case approval.KindAnswer:
		return a.Verdict
	case approval.KindWithdrawal:
		return "withdrawal"
	}
	return a.Kind + " " + a.Verdict
}

// channelEvidence names what a bridge saw, so an answer can be checked
// against Slack's or GitHub's own audit log.
func channelEvidence(c *approval.Channel) string {
	switch c.Kind {
	case "slack":
		return fmt.Sprintf("slack (user %s, team %s, action %s)", c.SlackUser, c.SlackTeam, c.SlackActionTS)
	case "github":
		if c.GitHubReview != 0 {
			return fmt.Sprintf("github (login %s, user id %d, review %d in %s)", c.GitHubLogin, c.GitHubUserID, c.GitHubReview, c.GitHubRepo)
		}
		return fmt.Sprintf("github (login %s, user id %d, comment %d in %s)", c.GitHubLogin, c.GitHubUserID, c.GitHubComment, c.GitHubRepo)
	}
	return c.Kind
}
