package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/visible"
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
				return &localapi.UsageError{Msg: "--timeout goes with --wait"}
			}
			return statusShow(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Wait, "wait", false, "block until the decision lands (0), is denied, withdrawn or expires (77), or --timeout passes (124)")
	cmd.Flags().StringVar(&opts.Timeout, "timeout", "", "with --wait: give up after this long (Go duration, e.g. 10m)")
	return cmd
}

// statusShow is status without --wait: the API's result (in-process, or
// the runner service's), rendered here, on the caller's side.
func statusShow(o *StatusOptions) error {
	f := o.F
	a, err := f.api()
	if err != nil {
		return err
	}
	if la, ok := a.(localapi.API); ok && f.IO.ErrTTY && !f.JSON {
		la.Progress = localapi.ProgressPrinter(f.IO.Err)
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
		for _, d := range s.Files {
			for _, line := range bridge.DiffLines(d) {
				fmt.Fprintf(w, "  %s\n", line)
			}
		}
	} else {
		fmt.Fprintf(w, "fingerprint: %s\noperation:   %s\ntarget:      %s\n", visible.Line(s.Fingerprint), visible.Line(s.Operation), visible.Word(s.Target))
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
		fmt.Fprintf(w, "problem:     %s\n", visible.Line(p.String()))
	}
	fmt.Fprintf(w, "why:         %s\n", s.Explanation.Sentence)
	if s.ApprovalPage != "" {
		fmt.Fprintf(w, "page:        %s (approve or deny with your passkey)\n", s.ApprovalPage)
	}
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
	fmt.Fprintf(w, "gate:        closed (%s): %s\n", r.Code, visible.Line(r.Reason))
	if len(r.Missing) > 0 {
		fmt.Fprintf(w, "missing:     %s\n", visible.Line(strings.Join(r.Missing, "; ")))
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
