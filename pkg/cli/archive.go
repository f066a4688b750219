package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// ArchiveInitOptions are archive init's inputs.
type ArchiveInitOptions struct {
	F *Factory `json:"-"`
}

// NewCmdArchive builds `archive init`.
func NewCmdArchive(f *Factory, runF func(*ArchiveInitOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "Manage the S3 receipt archive",
		Example: `  prod-write archive init
  prod-write archive init --json`,
	}
	opts := &ArchiveInitOptions{F: f}
	cmd.AddCommand(&cobra.Command{
		Use:   "init",
		Short: "Create the configured S3 bucket with object lock and a default retention; idempotent",
		Long: `init creates the bucket that prod-write.toml's [archive] names, with object
lock and a default retention of archive.lock_mode (GOVERNANCE or COMPLIANCE)
for archive.lock_days, so that every receipt shipped there is locked. Both
keys are required.

Running it again changes nothing. A bucket that exists with object lock and
that default retention is fine; one with object lock and no default
retention gets it. One without object lock, or with another default
retention, is a configuration error (exit 78) saying what to do: init never
changes a retention, and object lock is switched on when a bucket is
created. docs/DISTRIBUTED.md lists the IAM permissions it needs.`,
		Example: `  prod-write archive init
  prod-write --config /etc/prod-write/prod-write.toml archive init --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return archiveInitRun(opts)
		},
	})
	return cmd
}

func archiveInitRun(o *ArchiveInitOptions) error {
	f := o.F
	c, err := f.Config()
	if err != nil {
		return err
	}
	a := c.Archive
	switch {
	case a.Bucket == "":
		return &config.Error{Path: c.Path, Msg: "no archive configured: set archive.bucket (and prefix, lock_mode, lock_days) to archive receipts to S3"}
	case a.LockMode == "":
		return &config.Error{Path: c.Path, Msg: "archive init needs archive.lock_mode (GOVERNANCE or COMPLIANCE) and archive.lock_days: the default retention that locks every receipt in the bucket"}
	}
	// Config hands the command to prod-write-net when this build lacks
	// f.AWS, so it is set here.
	created, err := f.AWS.InitArchive(context.Background(), c)
	var ce *config.Error
	if errors.As(err, &ce) {
		return err
	}
	if err != nil {
		return &ExitError{Code: ExitIOErr, Msg: "archive init: " + localapi.OneLine(err)}
	}
	if f.JSON {
		return printDoc(f.IO.Out, map[string]any{"bucket": a.Bucket, "created": created, "lock_mode": a.LockMode, "lock_days": a.LockDays})
	}
	verb := "exists"
	if created {
		verb = "created"
	}
	_, err = fmt.Fprintf(f.IO.Out, "bucket %s: %s, object lock with default retention %s for %d days\n", a.Bucket, verb, a.LockMode, a.LockDays)
	return err
}
