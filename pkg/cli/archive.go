package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/admin"
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
	r, err := admin.ArchiveInit(context.Background(), &f.Env)
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, r)
	}
	verb := "exists"
	if r.Created {
		verb = "created"
	}
	_, err = fmt.Fprintf(f.IO.Out, "bucket %s: %s, object lock with default retention %s for %d days\n", r.Bucket, verb, r.LockMode, r.LockDays)
	return err
}
