package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/admin"
	"github.com/prod-write/prod-write/receipts"
)

// HistoryOptions are `history record`'s inputs.
type HistoryOptions struct {
	F        *Factory `json:"-"`
	Trust    string
	Registry string
	History  string
	Rollout  time.Duration
}

// NewCmdHistory builds `history record`.
func NewCmdHistory(f *Factory, runF func(*HistoryOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "history",
		Short:   "Record the trust policy and registry versions replay judges receipts by",
		Example: "  prod-write history record --rollout 30m",
	}
	opts := &HistoryOptions{F: f}
	rec := &cobra.Command{
		Use:   "record",
		Short: "Record the current trust policy and operation definitions in the history, with when they came into force",
		Long: `record keeps the current trust policy and every operation definition in the
history directory by digest (history/trust/sha256-HEX.toml,
history/operations/sha256-HEX.json; never overwritten), and in
history/versions.toml when each was in force: a version new since the last
record is in force from that record on (it can have been deployed at any
time since), and the one it replaces until now plus --rollout. The first
record's versions are in force from before the history began. Replay then
fails a receipt naming a version outside its interval (superseded,
not_yet_in_force). Running it again with nothing changed writes nothing.

Where trust.toml and the registry live in a git repository, replay reads
when each version was in force from the protected branch's own history and
no record is needed (docs/REPLAY.md, "History"). Elsewhere, run it after
each change to trust.toml or the registry, before or after the reload, and
keep history/ as protected as trust.toml itself: whoever can write the
history decides what replay accepts. The runner service refuses to load a
version that history/versions.toml lacks (docs/DEPLOYMENT.md).`,
		Example: `  prod-write history record
  prod-write history record --trust trust.toml --registry operations --history history --rollout 30m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return historyRecord(opts)
		},
	}
	rec.Flags().StringVar(&opts.Trust, "trust", "", "the trust policy (default: the configured one)")
	rec.Flags().StringVar(&opts.Registry, "registry", "", "the registry directory (default: the configured one)")
	rec.Flags().StringVar(&opts.History, "history", "", "the history directory (default: history/ beside the trust policy)")
	rec.Flags().DurationVar(&opts.Rollout, "rollout", receipts.DefaultRollout, "how long a replaced version still counts after this record: the time hosts take to load the new one")
	cmd.AddCommand(rec)
	return cmd
}

// historyDoc is `history record --json`.
func historyRecord(o *HistoryOptions) error {
	f := o.F
	r, err := admin.HistoryRecord(&f.Env, admin.HistoryRecordRequest{Trust: o.Trust, Registry: o.Registry, History: o.History, Rollout: o.Rollout})
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, r)
	}
	if len(r.Changes) == 0 {
		fmt.Fprintf(f.IO.Out, "%s: up to date\n", r.History)
		return nil
	}
	for _, c := range r.Changes {
		name := ""
		if c.Name != "" {
			name = " " + c.Name
		}
		switch {
		case c.What == "superseded":
			fmt.Fprintf(f.IO.Out, "%s %s%s %s, in force until %s\n", c.What, c.Kind, name, c.Digest, c.At.Format(time.RFC3339))
		case c.At.IsZero():
			fmt.Fprintf(f.IO.Out, "%s %s%s %s, in force from before the history began\n", c.What, c.Kind, name, c.Digest)
		default:
			fmt.Fprintf(f.IO.Out, "%s %s%s %s, in force from %s\n", c.What, c.Kind, name, c.Digest, c.At.Format(time.RFC3339))
		}
	}
	return nil
}
