// Package awsbackend is prod-write's distributed half (docs/DESIGN.md §10,
// docs/DISTRIBUTED.md): the DynamoDB store and the S3 receipt archive as the
// commands use them, behind [cli.AWS]. Only prod-write-net links it, so the
// AWS SDK's start-up cost stays out of every embedded deployment's commands
// (docs/adr/0009-aws-binary.md).
package awsbackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prod-write/prod-write/pkg/dsse"

	"github.com/prod-write/prod-write/pkg/archive"
	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/pkg/store/dynamo"
	"github.com/prod-write/prod-write/receipts"
)

// Backend implements [cli.AWS].
type Backend struct{}

var _ cli.AWS = Backend{}

// openDynamo opens the DynamoDB store that c names. It does not contact
// DynamoDB; the store fails closed on first use.
func openDynamo(c *config.Config) (*dynamo.Store, error) {
	if c.Store.Table == "" {
		return nil, &config.Error{Path: c.Path, Msg: `store.table is not set: the dynamodb backend needs a table name`}
	}
	s, err := dynamo.Open(context.Background(), dynamo.Options{
		Table: c.Store.Table, Region: c.Store.Region, Endpoint: c.Store.Endpoint,
		// No caller's environment reaches this process: in local mode it
		// is one account's, under the runner service it is the unit's
		// (docs/adr/0011-runner-service.md).
	})
	if err != nil {
		return nil, &config.Error{Path: c.Path, Msg: "store: " + err.Error(), Err: err}
	}
	return s, nil
}

// OpenStore implements [cli.AWS].
func (Backend) OpenStore(c *config.Config) (store.Store, error) {
	s, err := openDynamo(c)
	if err != nil {
		return nil, err
	}
	return failClosed{s}, nil
}

// InitStore implements [cli.AWS].
func (Backend) InitStore(ctx context.Context, c *config.Config, wait time.Duration) (string, bool, error) {
	s, err := openDynamo(c)
	if err != nil {
		return "", false, err
	}
	created, err := s.CreateTable(ctx, wait)
	return s.Table(), created, err
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

func (f failClosed) Consume(id string, uses int, run string) (int, error) {
	slot, err := f.s.Consume(id, uses, run)
	return slot, unavailable("", err)
}

func (f failClosed) Used(ids []string) (map[string]int, error) {
	used, err := f.s.Used(ids)
	return used, unavailable("", err)
}

// archiveConfig is the archive that c configures.
func archiveConfig(c *config.Config) archive.Config {
	a := c.Archive
	return archive.Config{Bucket: a.Bucket, Prefix: a.Prefix, Region: a.Region, Endpoint: a.Endpoint,
		LockMode: a.LockMode, LockDays: a.LockDays}
}

// openArchive opens ac, reporting a failure as a configuration error.
func openArchive(ctx context.Context, c *config.Config, ac archive.Config) (*archive.Archive, error) {
	a, err := archive.Open(ctx, ac)
	if err != nil {
		path := ""
		if c != nil {
			path = c.Path
		}
		return nil, &config.Error{Path: path, Msg: err.Error(), Err: err}
	}
	return a, nil
}

// InitArchive implements [cli.AWS].
func (Backend) InitArchive(ctx context.Context, c *config.Config) (bool, error) {
	a, err := openArchive(ctx, c, archiveConfig(c))
	if err != nil {
		return false, err
	}
	created, err := a.Init(ctx)
	var lce *archive.LockConfigError
	if errors.As(err, &lce) {
		return created, &config.Error{Path: c.Path, Msg: "archive init", Err: err}
	}
	return created, err
}

// ShipReceipts implements [cli.AWS].
func (Backend) ShipReceipts(ctx context.Context, c *config.Config, entries []receipts.Appended) error {
	list := make([]archive.Entry, len(entries))
	for i, e := range entries {
		list[i] = archive.Entry{Seq: e.Seq, Hash: e.Hash}
	}
	a, err := archive.Open(ctx, archiveConfig(c))
	if err != nil {
		return err
	}
	return a.Ship(ctx, c.JournalPath(), list...)
}

// SyncReceipts implements [cli.AWS].
func (Backend) SyncReceipts(ctx context.Context, c *config.Config, journal *os.File) (cli.ArchiveSync, error) {
	a, err := openArchive(ctx, c, archiveConfig(c))
	if err != nil {
		return cli.ArchiveSync{}, err
	}
	res, err := a.Sync(ctx, journal)
	var (
		conflict *archive.ConflictError
		tamper   *archive.TamperError
		foreign  *archive.ForeignError
	)
	if errors.As(err, &conflict) || errors.As(err, &tamper) || errors.As(err, &foreign) {
		err = fmt.Errorf("%w: %w", cli.ErrArchiveConflict, err)
	}
	return cli.ArchiveSync{URL: a.URL(), Lines: res.Lines, Shipped: res.Shipped, Present: res.Present}, err
}

// OpenArchive implements [cli.AWS]. The endpoint and region come from
// prod-write.toml only when its archive names the same bucket; otherwise
// from the standard AWS chain (AWS_REGION, AWS_ENDPOINT_URL_S3).
func (Backend) OpenArchive(ctx context.Context, c *config.Config, url string) (io.ReadCloser, error) {
	a, err := archiveAt(ctx, c, url)
	if err != nil {
		return nil, err
	}
	return a.Reader(ctx), nil
}

// ArchiveChains implements [cli.AWS], with the endpoint and region of
// [Backend.OpenArchive].
func (Backend) ArchiveChains(ctx context.Context, c *config.Config, url string) ([]string, error) {
	a, err := archiveAt(ctx, c, url)
	if err != nil {
		return nil, err
	}
	return a.Chains(ctx)
}

func archiveAt(ctx context.Context, c *config.Config, url string) (*archive.Archive, error) {
	bucket, prefix, ok := archive.ParseURL(url)
	if !ok {
		return nil, &config.Error{Msg: fmt.Sprintf("%q is not an S3 archive: want s3://bucket/prefix", url)}
	}
	ac := archive.Config{Bucket: bucket, Prefix: prefix}
	if c != nil && c.Archive.Bucket == bucket {
		ac.Region, ac.Endpoint = c.Archive.Region, c.Archive.Endpoint
	}
	return openArchive(ctx, nil, ac)
}

func (f failClosed) AdvanceSignCount(cred string, count uint32, run string) error {
	return unavailable("", f.s.AdvanceSignCount(cred, count, run))
}

func (f failClosed) SignCounts(creds []string) (map[string]uint32, error) {
	counts, err := f.s.SignCounts(creds)
	return counts, unavailable("", err)
}

func (f failClosed) PutContent(sum string, data []byte) error {
	return unavailable("", f.s.PutContent(sum, data))
}

func (f failClosed) Content(sum string) ([]byte, error) {
	b, err := f.s.Content(sum)
	return b, unavailable("", err)
}
