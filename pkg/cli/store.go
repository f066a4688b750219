package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/admin"
)

// The distributed backends (docs/DESIGN.md §10, docs/DISTRIBUTED.md): the DynamoDB
// store, `store init`, the S3 receipt archive, `receipts sync` and
// `replay s3://…`.

// StoreInitOptions are store init's inputs.
type StoreInitOptions struct {
	F    *Factory `json:"-"`
	Wait time.Duration
}

// NewCmdStore builds `store init`.
func NewCmdStore(f *Factory, runF func(*StoreInitOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Manage the store of plans, evidence and consumption",
		Example: `  prod-write store init
  prod-write store init --json`,
	}
	opts := &StoreInitOptions{F: f}
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the configured store (the DynamoDB table); idempotent",
		Long: `init creates the store that prod-write.toml configures. For the dynamodb
backend it creates the table (partition key pk, sort key sk, both strings,
on-demand capacity) and waits until it is ACTIVE; a table that exists with
that key schema is left as it is, one with another is an error. For the
embedded backend it creates the state directories. Running it again changes
nothing. docs/DISTRIBUTED.md lists the IAM permissions each role needs.`,
		Example: `  prod-write store init
  prod-write --config /etc/prod-write/prod-write.toml store init --wait 5m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return storeInitRun(opts)
		},
	}
	initCmd.Flags().DurationVar(&opts.Wait, "wait", 2*time.Minute, "how long to wait for the table to become ACTIVE")
	cmd.AddCommand(initCmd)
	return cmd
}

func storeInitRun(o *StoreInitOptions) error {
	f := o.F
	r, err := admin.StoreInit(context.Background(), &f.Env, o.Wait)
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, r)
	}
	if r.Table == "" {
		_, err = fmt.Fprintf(f.IO.Out, "store %s: ready (embedded)\n", r.Dir)
		return err
	}
	verb := "exists"
	if *r.Created {
		verb = "created (on-demand capacity)"
	}
	_, err = fmt.Fprintf(f.IO.Out, "table %s: %s, ACTIVE\n", r.Table, verb)
	return err
}

// ReceiptsSyncOptions are receipts sync's inputs.
type ReceiptsSyncOptions struct {
	F *Factory `json:"-"`
}

// newCmdReceiptsSync builds `receipts sync`.
func newCmdReceiptsSync(f *Factory, runF func(*ReceiptsSyncOptions) error) *cobra.Command {
	opts := &ReceiptsSyncOptions{F: f}
	return &cobra.Command{
		Use:   "sync",
		Short: "Ship every journal entry the S3 archive is missing",
		Long: `sync lists the configured S3 archive once and ships each complete journal
line that is not there, as its own object written with If-None-Match: *
(never overwriting) and object-lock retention where the bucket has it. Run
it after an outage: run ships its receipts as it goes, and keeps them in the
journal when it cannot. Running it again ships nothing.

A journal line whose sequence number the archive holds with other bytes is
reported and not shipped: each journal needs its own archive prefix.`,
		Example: "  prod-write receipts sync --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return receiptsSyncRun(opts)
		},
	}
}

func receiptsSyncRun(o *ReceiptsSyncOptions) error {
	f := o.F
	r, err := admin.ReceiptsSync(context.Background(), &f.Env)
	if r != nil {
		if f.JSON {
			if perr := printJSON(f.IO.Out, r); perr != nil {
				return perr
			}
		} else {
			fmt.Fprintf(f.IO.Out, "%s: %d shipped, %d already there, of %d journal entries\n", r.Archive, r.Shipped, r.Present, r.Lines)
		}
	}
	return err
}
