package cli

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// FileOptions are file's inputs.
type FileOptions struct {
	F           *Factory `json:"-"`
	Fingerprint string
	Record      approval.CertaintyRecord
	TTL         time.Duration
}

// NewCmdFile builds `file`.
func NewCmdFile(f *Factory, runF func(*FileOptions) error) *cobra.Command {
	opts := &FileOptions{F: f}
	r := &opts.Record
	cmd := &cobra.Command{
		Use:   "file FP --summary … --effect … --blast-radius … --rollback … --certainty high|medium|low",
		Short: "File a certainty record for a plan (role operator)",
		Long: `file is an operator vouching for a plan: what it does, its expected effect, its
blast radius, how to roll it back and how certain the operator is. It prints
the plan it vouches for and stores the signed record; approvers then answer
it with decide (or on a bridge).`,
		Example: `  prod-write file sha256:9f… --key keys/smith.key --summary "push api config" \
      --effect "api reloads its config" --blast-radius "api in staging" \
      --rollback "push the previous file" --certainty high`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fingerprint = args[0]
			for flag, v := range map[string]string{"--summary": r.Summary, "--effect": r.Effect, "--blast-radius": r.BlastRadius, "--rollback": r.Rollback} {
				if v == "" {
					return &localapi.UsageError{Msg: "file needs " + flag}
				}
			}
			if !slices.Contains(approval.CertaintyLevels, r.Certainty) {
				return &localapi.UsageError{Msg: "--certainty must be high, medium or low"}
			}
			if runF != nil {
				return runF(opts)
			}
			return fileShow(opts)
		},
	}
	cmd.Flags().StringVar(&r.Summary, "summary", "", "what the plan does")
	cmd.Flags().StringVar(&r.Effect, "effect", "", "the expected effect")
	cmd.Flags().StringVar(&r.BlastRadius, "blast-radius", "", "what could be hurt if it goes wrong")
	cmd.Flags().StringVar(&r.Rollback, "rollback", "", "how to undo it")
	cmd.Flags().StringVar(&r.Certainty, "certainty", "", "high, medium or low")
	cmd.Flags().DurationVar(&opts.TTL, "ttl", 0, "how long the record is valid (default: the operation's approval ttl)")
	return cmd
}

// fileShow is file: the API's call (in-process, or the runner service's),
// its result rendered here, on the caller's side.
func fileShow(o *FileOptions) error {
	a, err := o.F.api()
	if err != nil {
		return err
	}
	r := o.Record
	res, err := a.File(context.Background(), api.FileRequest{
		Fingerprint: o.Fingerprint, Summary: r.Summary, Effect: r.Effect, BlastRadius: r.BlastRadius,
		Rollback: r.Rollback, Certainty: r.Certainty, TTL: o.TTL,
	})
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printJSON(o.F.IO.Out, res.Written)
	}
	w := o.F.IO.Out
	fmt.Fprintf(w, "%s vouches for this plan:\n", res.Actor)
	printPlan(w, res.Plan)
	fmt.Fprintf(w, "record:      %s (certainty %s, expires %s)\n", res.ID, res.Certainty, res.Expires.Format(time.RFC3339))
	return nil
}

// DecideOptions are decide's inputs.
type DecideOptions struct {
	F           *Factory `json:"-"`
	Fingerprint string
	Answer      string
	Reason      string
	Record      string
	TTL         time.Duration
}

// NewCmdDecide builds `decide`.
func NewCmdDecide(f *Factory, runF func(*DecideOptions) error) *cobra.Command {
	opts := &DecideOptions{F: f}
	cmd := &cobra.Command{
		Use:   "decide FP approve|deny [--reason …]",
		Short: "Approve or deny a filed plan on the CLI (role approver)",
		Long: `decide shows the plan and the certainty record it answers, then stores your
signed answer, bound to the fingerprint and to that record. An answer
expires after --ttl (default: the operation's approval ttl, like file and
gera; 1h unless the operation says otherwise).

A deny is a veto: it wins over every approval while it stands, and when it
expires it does not lapse into a yes — every approval, record or Gera go
issued before it expired never counts again; only decisions made after it
has expired can open the gate. Anyone holding the approver role may deny,
the planner and the filer of the record included: a veto only reduces what
may run. Nobody approves a plan they planned or a record they filed.`,
		Example: `  prod-write decide sha256:9f… approve --key keys/alice.key
  prod-write decide sha256:9f… deny --reason "not during the freeze" --key keys/bob.key`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fingerprint, opts.Answer = args[0], args[1]
			if opts.Answer != approval.Approve && opts.Answer != approval.Deny {
				return &localapi.UsageError{Msg: fmt.Sprintf("answer %q: want approve or deny", opts.Answer)}
			}
			if runF != nil {
				return runF(opts)
			}
			return decideShow(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why")
	cmd.Flags().StringVar(&opts.Record, "record", "", "the certainty record `ID` answered (default: the newest valid one)")
	cmd.Flags().DurationVar(&opts.TTL, "ttl", 0, "how long the answer is valid (default: the operation's approval ttl, 1h unless it says otherwise)")
	return cmd
}

// decideShow is decide: the API's call, its result rendered here.
func decideShow(o *DecideOptions) error {
	a, err := o.F.api()
	if err != nil {
		return err
	}
	res, err := a.Decide(context.Background(), api.DecideRequest{Fingerprint: o.Fingerprint, Answer: o.Answer, Reason: o.Reason, Record: o.Record, TTL: o.TTL})
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printJSON(o.F.IO.Out, res.Written)
	}
	w := o.F.IO.Out
	printPlan(w, res.Plan)
	if rec := res.Answered; rec != nil {
		fmt.Fprintf(w, "record:      %s by %s, certainty %s\n", res.Record, rec.Filer, rec.Certainty)
		fmt.Fprintf(w, "  summary:      %s\n  effect:       %s\n  blast radius: %s\n  rollback:     %s\n", rec.Summary, rec.Effect, rec.BlastRadius, rec.Rollback)
	}
	fmt.Fprintf(w, "answer:      %s by %s (%s, expires %s)\n", res.Verdict, res.Actor, res.ID, res.Expires.Format(time.RFC3339))
	return nil
}

// GeraOptions are gera's inputs.
type GeraOptions struct {
	F           *Factory `json:"-"`
	Decision    string
	Fingerprint string
	TTL         time.Duration
	Uses        int
	Reason      string
}

// NewCmdGera builds `gera`.
func NewCmdGera(f *Factory, runF func(*GeraOptions) error) *cobra.Command {
	opts := &GeraOptions{F: f}
	cmd := &cobra.Command{
		Use:   "gera go|no-go FP [--ttl D] [--uses N]",
		Short: "Record a standing go or no-go for a fingerprint (role gera)",
		Long: `gera records a standing decision for one fingerprint. A go lets the plan run
up to --uses times before it expires; a no-go vetoes it.`,
		Example: `  prod-write gera go sha256:9f… --uses 10 --ttl 24h --key keys/gera.key
  prod-write gera no-go sha256:9f… --reason "frozen" --key keys/gera.key`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Decision, opts.Fingerprint = args[0], args[1]
			if opts.Decision != approval.Go && opts.Decision != approval.NoGo {
				return &localapi.UsageError{Msg: fmt.Sprintf("decision %q: want go or no-go", opts.Decision)}
			}
			if opts.Uses < 1 {
				return &localapi.UsageError{Msg: "--uses must be at least 1"}
			}
			if runF != nil {
				return runF(opts)
			}
			return geraShow(opts)
		},
	}
	cmd.Flags().DurationVar(&opts.TTL, "ttl", 0, "how long the decision stands (default: the operation's approval ttl)")
	cmd.Flags().IntVar(&opts.Uses, "uses", 1, "how many runs a go allows")
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why")
	return cmd
}

// geraShow is gera: the API's call, its result rendered here.
func geraShow(o *GeraOptions) error {
	a, err := o.F.api()
	if err != nil {
		return err
	}
	res, err := a.Gera(context.Background(), api.GeraRequest{Fingerprint: o.Fingerprint, Decision: o.Decision, Uses: o.Uses, Reason: o.Reason, TTL: o.TTL})
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printJSON(o.F.IO.Out, res.Written)
	}
	uses := 0
	if res.Uses != nil {
		uses = *res.Uses
	}
	fmt.Fprintf(o.F.IO.Out, "gera %s for %s by %s (%s; uses %d; expires %s)\n", res.Verdict, res.Fingerprint, res.Actor, res.ID, uses, res.Expires.Format(time.RFC3339))
	return nil
}

// WithdrawOptions are withdraw's inputs.
type WithdrawOptions struct {
	F           *Factory `json:"-"`
	Fingerprint string
}

// NewCmdWithdraw builds `withdraw`.
func NewCmdWithdraw(f *Factory, runF func(*WithdrawOptions) error) *cobra.Command {
	opts := &WithdrawOptions{F: f}
	cmd := &cobra.Command{
		Use:   "withdraw FP",
		Short: "Withdraw your own plan, for good",
		Long: `withdraw is the planner taking back its own plan. It is terminal: the plan can
never pass the gate again, whatever evidence is filed before or after. Only
the planner may withdraw, and it needs no approval, since it can only reduce
what may run.`,
		Example: "  prod-write withdraw sha256:9f… --key keys/agent.key",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fingerprint = args[0]
			if runF != nil {
				return runF(opts)
			}
			return withdrawShow(opts)
		},
	}
	return cmd
}

// withdrawShow is withdraw: the API's call, its result rendered here.
func withdrawShow(o *WithdrawOptions) error {
	a, err := o.F.api()
	if err != nil {
		return err
	}
	res, err := a.Withdraw(context.Background(), api.WithdrawRequest{Fingerprint: o.Fingerprint})
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printJSON(o.F.IO.Out, res.Written)
	}
	fmt.Fprintf(o.F.IO.Out, "withdrawn: %s (by %s); it can never run\n", res.Fingerprint, res.Actor)
	return nil
}
