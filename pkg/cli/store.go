package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/archive"
	"github.com/prod-write/prod-write/pkg/boundary"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/pkg/store/dynamo"
	"github.com/prod-write/prod-write/receipts"
)

// The distributed backends (SPEC §10, docs/DISTRIBUTED.md): the DynamoDB
// store, `store init`, the S3 receipt archive, `receipts sync` and
// `replay s3://…`.

// openDynamo opens the DynamoDB store that c names. It does not contact
// DynamoDB; the store fails closed on first use.
func openDynamo(c *config.Config) (*dynamo.Store, error) {
	if c.Store.Table == "" {
		return nil, &config.Error{Path: c.Path, Msg: `store.table is not set: the dynamodb backend needs a table name`}
	}
	s, err := dynamo.Open(context.Background(), dynamo.Options{
		Table: c.Store.Table, Region: c.Store.Region, Endpoint: c.Store.Endpoint,
		// Setuid: the caller's environment and $HOME/.aws are not
		// trusted (docs/DISTRIBUTED.md, "Credentials").
		Isolated: boundary.Privileged(),
	})
	if err != nil {
		return nil, &config.Error{Path: c.Path, Msg: "store: " + err.Error(), Err: err}
	}
	return s, nil
}

// failClosed turns a store that cannot be reached into a refusal
// (store_unavailable, exit 77): the gate cannot be evaluated, so nothing
// runs, and the caller is told so in the same typed way as any other "no"
// (docs/DISTRIBUTED.md, "Failing closed"). Every other error and answer
// passes through unchanged.
type failClosed struct{ s store.Store }

var _ store.Store = failClosed{}

func unavailable(fp string, err error) error {
	var de *dynamo.Error
	if !errors.As(err, &de) {
		return err
	}
	r := refusal.New(refusal.StoreUnavailable, "the DynamoDB store failed, so the gate cannot be evaluated and nothing runs: %s", de.Error()).
		Needs("a reachable DynamoDB store")
	if store.CheckFingerprint(fp) == nil {
		r.Fingerprint = fp
	}
	return r
}

func (f failClosed) PutPlan(fp string, env *dsse.Envelope) error {
	return unavailable(fp, f.s.PutPlan(fp, env))
}

func (f failClosed) GetPlan(fp string) (*dsse.Envelope, error) {
	env, err := f.s.GetPlan(fp)
	return env, unavailable(fp, err)
}

func (f failClosed) PutEvidence(fp, id string, env *dsse.Envelope) error {
	return unavailable(fp, f.s.PutEvidence(fp, id, env))
}

func (f failClosed) Evidence(fp string) ([]*dsse.Envelope, []store.Problem, error) {
	recs, problems, err := f.s.Evidence(fp)
	return recs, problems, unavailable(fp, err)
}

func (f failClosed) Consume(id string, uses int) (int, error) {
	slot, err := f.s.Consume(id, uses)
	return slot, unavailable("", err)
}

func (f failClosed) Used(ids []string) (map[string]int, error) {
	used, err := f.s.Used(ids)
	return used, unavailable("", err)
}

// StoreInitOptions are store init's inputs.
type StoreInitOptions struct {
	F    *Factory
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
		s, err := openDynamo(c)
		if err != nil {
			return err
		}
		created, err := s.CreateTable(context.Background(), o.Wait)
		if err != nil {
			return &ExitError{Code: ExitIOErr, Msg: err.Error()}
		}
		out["table"], out["created"], out["status"] = s.Table(), created, "ACTIVE"
		if !f.JSON {
			verb := "exists"
			if created {
				verb = "created (on-demand capacity)"
			}
			fmt.Fprintf(f.IO.Out, "table %s: %s, ACTIVE\n", s.Table(), verb)
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
		return printJSON(f.IO.Out, out)
	}
	return nil
}

// archiveConfig is the archive that c configures; ok is false when none
// is.
func archiveConfig(c *config.Config) (archive.Config, bool) {
	a := c.Archive
	return archive.Config{Bucket: a.Bucket, Prefix: a.Prefix, Region: a.Region, Endpoint: a.Endpoint,
		LockMode: a.LockMode, LockDays: a.LockDays, Isolated: boundary.Privileged()}, a.Bucket != ""
}

// shipTimeout bounds shipping a run's receipts: an unreachable archive
// must not hold a finished run for long, and they are shipped later by
// `receipts sync` anyway.
const shipTimeout = 10 * time.Second

// shipReceipts archives a run's receipts when an archive is configured.
// It is best effort and never fails the run: the receipts are in the
// journal already, which stays the write-ahead record; on failure one
// warning line says so and how to ship them later.
func shipReceipts(f *Factory, c *config.Config, entries ...receipts.Appended) {
	ac, ok := archiveConfig(c)
	if !ok || len(entries) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shipTimeout)
	defer cancel()
	var seqs []any
	list := make([]archive.Entry, len(entries))
	for i, e := range entries {
		list[i] = archive.Entry{Seq: e.Seq, Hash: e.Hash}
		seqs = append(seqs, e.Seq)
	}
	a, err := archive.Open(ctx, ac)
	if err == nil {
		err = a.Ship(ctx, c.JournalPath(), list...)
	}
	if err != nil {
		fmt.Fprintf(f.IO.Err, "prod-write: warning: receipts %v are in the local journal but not archived (`prod-write receipts sync` ships them): %s\n", seqs, oneLine(err))
	}
}

// oneLine joins the lines of an error (errors.Join makes several).
func oneLine(err error) string {
	b := []byte(err.Error())
	for i, c := range b {
		if c == '\n' {
			b[i] = ';'
		}
	}
	return string(b)
}

// ReceiptsSyncOptions are receipts sync's inputs.
type ReceiptsSyncOptions struct {
	F *Factory
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
	ac, ok := archiveConfig(c)
	if !ok {
		return &config.Error{Path: c.Path, Msg: "no archive configured: set archive.bucket (and prefix) to sync receipts to S3"}
	}
	a, err := archive.Open(context.Background(), ac)
	if err != nil {
		return &config.Error{Path: c.Path, Msg: err.Error(), Err: err}
	}
	fl, err := openJournal(f)
	if err != nil {
		return err
	}
	defer fl.Close()
	res, err := a.Sync(context.Background(), fl)
	// Report what was done, unless the archive could not even be listed.
	if err == nil || res.Lines > 0 {
		if f.JSON {
			if perr := printJSON(f.IO.Out, map[string]any{"archive": a.URL(), "lines": res.Lines, "shipped": res.Shipped, "present": res.Present, "ok": err == nil}); perr != nil {
				return perr
			}
		} else {
			fmt.Fprintf(f.IO.Out, "%s: %d shipped, %d already there, of %d journal entries\n", a.URL(), res.Shipped, res.Present, res.Lines)
		}
	}
	var conflict *archive.ConflictError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &conflict):
		return &dataError{err: fmt.Errorf("receipts sync: %s", oneLine(err))}
	}
	return &ExitError{Code: ExitIOErr, Msg: "receipts sync: " + oneLine(err)}
}

// openReplayInput opens what replay reads: a journal file, or the S3
// archive for an s3://bucket/prefix path.
//
// For the archive, the endpoint and region come from prod-write.toml only
// when its archive names the same bucket; otherwise from the standard AWS
// chain (AWS_REGION, AWS_ENDPOINT_URL_S3). What is read is judged by the
// trust policy either way: an archive served from elsewhere cannot forge a
// receipt, and a cut-off one is caught by --checkpoint.
func openReplayInput(f *Factory, path string) (io.ReadCloser, error) {
	bucket, prefix, ok := archive.ParseURL(path)
	if !ok {
		return os.Open(path)
	}
	ac := archive.Config{Bucket: bucket, Prefix: prefix, Isolated: boundary.Privileged()}
	if c, err := f.Config(); err == nil && c.Archive.Bucket == bucket {
		ac.Region, ac.Endpoint = c.Archive.Region, c.Archive.Endpoint
	}
	a, err := archive.Open(context.Background(), ac)
	if err != nil {
		return nil, &config.Error{Msg: err.Error(), Err: err}
	}
	return ioFailure{a.Reader(context.Background())}, nil
}

// ioFailure makes a failure to read the archive an I/O error (exit 74),
// as a journal file that cannot be read is, rather than an internal one.
type ioFailure struct{ io.ReadCloser }

func (r ioFailure) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &ExitError{Code: ExitIOErr, Msg: fmt.Sprintf("replay: %v", err)}
	}
	return n, err
}
