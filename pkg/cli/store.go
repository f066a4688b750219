package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// The distributed backends (SPEC §10, docs/DISTRIBUTED.md): the DynamoDB
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
	c, err := f.Config()
	if err != nil {
		return err
	}
	out := map[string]any{"backend": c.Store.Backend}
	switch c.Store.Backend {
	case "dynamodb":
		// Config hands the command to prod-write-net when this build
		// lacks f.AWS, so it is set here.
		table, created, err := f.AWS.InitStore(context.Background(), c, o.Wait)
		var ce *config.Error
		if errors.As(err, &ce) {
			return err
		}
		if err != nil {
			return &ExitError{Code: ExitIOErr, Msg: err.Error()}
		}
		out["table"], out["created"], out["status"] = table, created, "ACTIVE"
		if !f.JSON {
			verb := "exists"
			if created {
				verb = "created (on-demand capacity)"
			}
			fmt.Fprintf(f.IO.Out, "table %s: %s, ACTIVE\n", table, verb)
		}
	default:
		if _, err := f.Store(c); err != nil {
			return err
		}
		out["dir"] = c.StoreDir()
		if !f.JSON {
			fmt.Fprintf(f.IO.Out, "store %s: ready (embedded)\n", c.StoreDir())
		}
	}
	if f.JSON {
		return printDoc(f.IO.Out, out)
	}
	return nil
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
	c, err := f.Config()
	if err != nil {
		return err
	}
	if c.Archive.Bucket == "" {
		return &config.Error{Path: c.Path, Msg: "no archive configured: set archive.bucket (and prefix) to sync receipts to S3"}
	}
	fl, err := localapi.OpenJournal(&f.Env)
	if err != nil {
		return err
	}
	defer fl.Close()
	// Config hands the command to prod-write-net when this build lacks
	// f.AWS, so it is set here.
	res, err := f.AWS.SyncReceipts(context.Background(), c, fl)
	var ce *config.Error
	if errors.As(err, &ce) {
		return err
	}
	// Report what was done, unless the archive could not even be listed.
	if err == nil || res.Lines > 0 {
		if f.JSON {
			if perr := printDoc(f.IO.Out, map[string]any{"archive": res.URL, "lines": res.Lines, "shipped": res.Shipped, "present": res.Present, "ok": err == nil}); perr != nil {
				return perr
			}
		} else {
			fmt.Fprintf(f.IO.Out, "%s: %d shipped, %d already there, of %d journal entries\n", res.URL, res.Shipped, res.Present, res.Lines)
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrArchiveConflict):
		return &localapi.DataError{Err: fmt.Errorf("receipts sync: %s", localapi.OneLine(err))}
	}
	return &ExitError{Code: ExitIOErr, Msg: "receipts sync: " + localapi.OneLine(err)}
}
