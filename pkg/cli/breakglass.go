package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/visible"
	"github.com/prod-write/prod-write/receipts"
)

// BreakGlassOptions are `break-glass`'s inputs.
type BreakGlassOptions struct {
	F           *Factory `json:"-"`
	Fingerprint string
	Reason      string
	Incident    string
	TTL         time.Duration
}

// BreakGlassReviewOptions are `break-glass review`'s inputs.
type BreakGlassReviewOptions struct {
	F     *Factory `json:"-"`
	Run   string
	Notes string
}

// NewCmdBreakGlass builds `break-glass` and `break-glass review`
// (docs/adr/0028-break-glass.md).
func NewCmdBreakGlass(f *Factory, runF func(*BreakGlassOptions) error, reviewF func(*BreakGlassReviewOptions) error) *cobra.Command {
	opts := &BreakGlassOptions{F: f}
	cmd := &cobra.Command{
		Use:   "break-glass FP --reason TEXT --incident REF [--ttl D]",
		Short: "Let one plan run once without its usual approvals (role break-glass; notified, reviewed)",
		Long: `break-glass signs a break-glass record: the plan FP, of an operation whose
approval.paths allow break-glass, may run once without its Gera go or
certainty record and approvals, within --ttl (default 15m, at most the
operation's break_glass_ttl). When it runs, every approver it skipped is
notified on the configured bridges and its receipts are marked break-glass.
Your next break-glass is refused until an approver other than you has
reviewed this run (break-glass review). A veto, a withdrawal or a freeze
still wins.`,
		Example: `  prod-write break-glass sha256:9f… --reason "api down, config rollback" --incident INC-4711 --key keys/oncall.key
  prod-write run sha256:9f…
  prod-write break-glass review 5c1f09a2e3b4 --key keys/alice.key`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fingerprint = args[0]
			if strings.TrimSpace(opts.Reason) == "" || strings.TrimSpace(opts.Incident) == "" {
				return &localapi.UsageError{Msg: "--reason and --incident are required"}
			}
			if runF != nil {
				return runF(opts)
			}
			return breakGlassShow(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why the usual approvals cannot wait")
	cmd.Flags().StringVar(&opts.Incident, "incident", "", "the incident this is for (a ticket or page reference)")
	cmd.Flags().DurationVar(&opts.TTL, "ttl", 0, "how long the record stands (default 15m; at most the operation's break_glass_ttl)")
	ropts := &BreakGlassReviewOptions{F: f}
	review := &cobra.Command{
		Use:   "review RUN [--notes TEXT]",
		Short: "Record a review of a break-glass run (role approver, not the breaker)",
		Long: `review signs a review of the break-glass run RUN (its run id, or a prefix of
at least 6 digits, as receipts list shows it), read from this host's
journal: the record reviewed is the one that ran. The review is stored and
written to the journal (a review receipt, signed by the runner key), so
replay of the journal alone sees the run reviewed. Until a review exists,
the breaker cannot break glass again. Nobody reviews their own.`,
		Example: "  prod-write break-glass review 5c1f09a2e3b4 --notes 'rollback was right' --key keys/alice.key",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ropts.Run = args[0]
			if reviewF != nil {
				return reviewF(ropts)
			}
			return breakGlassReviewShow(ropts)
		},
	}
	review.Flags().StringVar(&ropts.Notes, "notes", "", "what the review found")
	cmd.AddCommand(review)
	return cmd
}

// breakGlassShow is break-glass: the API's call (in-process, or the
// runner service's), its result rendered here, on the caller's side.
func breakGlassShow(o *BreakGlassOptions) error {
	a, err := o.F.api()
	if err != nil {
		return err
	}
	res, err := a.BreakGlass(context.Background(), api.BreakGlassRequest{Fingerprint: o.Fingerprint, Reason: o.Reason, Incident: o.Incident, TTL: o.TTL})
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printJSON(o.F.IO.Out, res.Written)
	}
	fmt.Fprintf(o.F.IO.Out, "break-glass by %s for %s, incident %s (%s; expires %s): run it now; the approvers it skips will be notified\n", res.Actor, res.Fingerprint, visible.Text(res.Incident), res.ID, res.Expires.Format(time.RFC3339))
	return nil
}

// breakGlassReviewShow is break-glass review: the API's call, its result
// rendered here.
func breakGlassReviewShow(o *BreakGlassReviewOptions) error {
	a, err := o.F.api()
	if err != nil {
		return err
	}
	res, err := a.BreakGlassReview(context.Background(), api.BreakGlassReviewRequest{Run: o.Run, Notes: o.Notes})
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printJSON(o.F.IO.Out, res.Written)
	}
	fmt.Fprintf(o.F.IO.Out, "break-glass run %s by %s reviewed by %s (%s)\n", res.RunID, res.Breaker, res.Actor, res.ID)
	return nil
}

// breakGlassLister marks break-glass runs in receipts list and lists them
// apart after the table, each with whether it is reviewed: as replay of
// the configured journal says (receipts.Replayer.BreakGlassRuns, the same
// code), so that the two never disagree (docs/adr/0028-break-glass.md).
type breakGlassLister struct {
	runs   map[int]*receipts.BreakGlassRun // by line
	listed []listedBreakGlass
	// redact drops what the breaker wrote (reason, incident) for a
	// caller with no key of the policy
	// (docs/adr/0040-what-a-keyless-caller-reads-of-a-receipt.md).
	redact bool
}

type listedBreakGlass struct {
	seq uint64
	run string
	*receipts.BreakGlassRun
}

// mark returns the break-glass run whose intent is the nth line listed, if
// it is one.
func (l *breakGlassLister) mark(n int, seq uint64, run string) *receipts.BreakGlassRun {
	bg := l.runs[n]
	if bg != nil {
		l.listed = append(l.listed, listedBreakGlass{seq, run, bg})
	}
	return bg
}

func (l *breakGlassLister) print(w io.Writer) {
	if len(l.listed) == 0 {
		return
	}
	fmt.Fprintf(w, "\nbreak-glass runs:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tRUN\tBREAKER\tINCIDENT\tREVIEWED")
	for _, r := range l.listed {
		rev := "no"
		if r.Reviewed {
			rev = "yes"
		}
		incident := visible.Text(r.Incident)
		if l.redact {
			incident = "(redacted)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.seq, r.run, r.Breaker, incident, rev)
	}
	tw.Flush()
}
