package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// FreezeGrantOptions are `freeze grant`'s inputs.
type FreezeGrantOptions struct {
	F           *Factory `json:"-"`
	Fingerprint string
	Freeze      string
	Reason      string
	TTL         time.Duration
}

// NewCmdFreeze builds `freeze`: the policy's freezes, and a grant of one
// plan through one of them (docs/adr/0021-freezes.md).
func NewCmdFreeze(f *Factory, runF func(*FreezeGrantOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "freeze",
		Short: "Freeze windows of the trust policy, and grants through them (role freeze)",
		Long: `During a freeze of the trust policy ([[freeze]], [[freeze_calendar]]) no
mutating operation it covers runs, whatever approval it has, unless a
principal with the freeze role grants that plan through that freeze.`,
		Example: `  prod-write freeze list
  prod-write freeze grant sha256:9f… --freeze year-end --reason "INC-42 hotfix" --key keys/cab.key`,
	}
	opts := &FreezeGrantOptions{F: f}
	grant := &cobra.Command{
		Use:   "grant FP --freeze NAME --reason TEXT [--ttl D]",
		Short: "Let one plan run through one freeze (role freeze; it still needs its approval)",
		Long: `grant signs a freeze grant: the plan FP may pass the gate while the freeze
NAME is in force, for --ttl (default: the operation's approval ttl). It is
not an approval: the plan still needs its Gera go or certainty record and
approvals, and the planner cannot grant its own plan.`,
		Example: `  prod-write freeze grant sha256:9f… --freeze year-end --reason "INC-42 hotfix" --key keys/cab.key`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fingerprint = args[0]
			if opts.Freeze == "" || opts.Reason == "" {
				return &localapi.UsageError{Msg: "--freeze and --reason are required"}
			}
			if runF != nil {
				return runF(opts)
			}
			return freezeGrantShow(opts)
		},
	}
	grant.Flags().StringVar(&opts.Freeze, "freeze", "", "the freeze's `NAME`, as freeze list shows it")
	grant.Flags().StringVar(&opts.Reason, "reason", "", "why this plan must run during the freeze")
	grant.Flags().DurationVar(&opts.TTL, "ttl", 0, "how long the grant stands (default: the operation's approval ttl)")
	list := &cobra.Command{
		Use:     "list",
		Short:   "The trust policy's freezes, and whether each is in force now",
		Example: "  prod-write freeze list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return freezeList(f)
		},
	}
	cmd.AddCommand(grant, list)
	return cmd
}

// freezeGrantShow is freeze grant: the API's call (in-process, or the
// runner service's), its result rendered here, on the caller's side.
func freezeGrantShow(o *FreezeGrantOptions) error {
	a, err := o.F.api()
	if err != nil {
		return err
	}
	res, err := a.FreezeGrant(context.Background(), api.FreezeGrantRequest{Fingerprint: o.Fingerprint, Freeze: o.Freeze, Reason: o.Reason, TTL: o.TTL})
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printJSON(o.F.IO.Out, res.Written)
	}
	fmt.Fprintf(o.F.IO.Out, "freeze grant for %s through %q by %s (%s; expires %s)\n", res.Fingerprint, res.Freeze, res.Actor, res.ID, res.Expires.Format(time.RFC3339))
	return nil
}

// freezeView is one freeze in `freeze list --json`.
type freezeView struct {
	*approval.Freeze
	From   time.Time `json:"from"`
	Until  time.Time `json:"until"`
	Active bool      `json:"active"`
}

func freezeList(f *Factory) error {
	c, err := f.Config()
	if err != nil {
		return err
	}
	p, err := f.Policy(c)
	if err != nil {
		return err
	}
	now := f.Now()
	views := []freezeView{}
	for _, fr := range p.Freezes {
		views = append(views, freezeView{Freeze: fr, From: fr.From(), Until: fr.Until(), Active: !now.Before(fr.From()) && now.Before(fr.Until())})
	}
	if f.JSON {
		return printJSON(f.IO.Out, struct {
			FormatVersion int          `json:"format_version"`
			Freezes       []freezeView `json:"freezes"`
		}{localapi.FormatVersion, views})
	}
	tw := tabwriter.NewWriter(f.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tFROM\tUNTIL\tOPERATIONS\tTARGETS\tNOW")
	for _, v := range views {
		state := "-"
		if v.Active {
			state = "in force"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.From.UTC().Format(time.RFC3339), v.Until.UTC().Format(time.RFC3339), allOr(v.Operations), allOr(v.Targets), state)
	}
	return tw.Flush()
}

func allOr(s []string) string {
	if len(s) == 0 {
		return "all"
	}
	return fmt.Sprint(s)
}
