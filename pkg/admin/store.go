package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// StoreInitResult is what store init made ready, as its --json prints it
// (its fields in the order the document has always had them): for the
// dynamodb backend its table, for the embedded one its directory.
type StoreInitResult struct {
	Backend       string `json:"backend"`
	Created       *bool  `json:"created,omitempty"`
	Dir           string `json:"dir,omitempty"`
	FormatVersion int    `json:"format_version"`
	Status        string `json:"status,omitempty"`
	Table         string `json:"table,omitempty"`
}

// StoreInit creates the store the configuration names: the DynamoDB table
// (waiting up to wait for it to be ACTIVE), or the embedded store's
// directories. It is idempotent.
func StoreInit(ctx context.Context, env *localapi.Env, wait time.Duration) (*StoreInitResult, error) {
	c, err := env.Config()
	if err != nil {
		return nil, err
	}
	r := &StoreInitResult{Backend: c.Store.Backend, FormatVersion: localapi.FormatVersion}
	switch c.Store.Backend {
	case "dynamodb":
		// Config hands the command to prod-write-net when this build
		// lacks env.AWS, so it is set here.
		table, created, err := env.AWS.InitStore(ctx, c, wait)
		var ce *config.Error
		if errors.As(err, &ce) {
			return nil, err
		}
		if err != nil {
			return nil, &localapi.ExitError{Code: localapi.ExitIOErr, Msg: err.Error()}
		}
		r.Table, r.Created, r.Status = table, &created, "ACTIVE"
	default:
		if _, err := env.Store(c); err != nil {
			return nil, err
		}
		r.Dir = c.StoreDir()
	}
	return r, nil
}

// ArchiveInitResult is the bucket archive init made or found, as its
// --json prints it.
type ArchiveInitResult struct {
	Bucket        string `json:"bucket"`
	Created       bool   `json:"created"`
	FormatVersion int    `json:"format_version"`
	LockDays      int    `json:"lock_days"`
	LockMode      string `json:"lock_mode"`
}

// ArchiveInit creates the configured S3 bucket with object lock and its
// default retention, or finds it so. It is idempotent, and never changes
// a retention.
func ArchiveInit(ctx context.Context, env *localapi.Env) (*ArchiveInitResult, error) {
	c, err := env.Config()
	if err != nil {
		return nil, err
	}
	a := c.Archive
	switch {
	case a.Bucket == "":
		return nil, &config.Error{Path: c.Path, Msg: "no archive configured: set archive.bucket (and prefix, lock_mode, lock_days) to archive receipts to S3"}
	case a.LockMode == "":
		return nil, &config.Error{Path: c.Path, Msg: "archive init needs archive.lock_mode (GOVERNANCE or COMPLIANCE) and archive.lock_days: the default retention that locks every receipt in the bucket"}
	}
	// Config hands the command to prod-write-net when this build lacks
	// env.AWS, so it is set here.
	created, err := env.AWS.InitArchive(ctx, c)
	var ce *config.Error
	if errors.As(err, &ce) {
		return nil, err
	}
	if err != nil {
		return nil, &localapi.ExitError{Code: localapi.ExitIOErr, Msg: "archive init: " + localapi.OneLine(err)}
	}
	return &ArchiveInitResult{Bucket: a.Bucket, Created: created, FormatVersion: localapi.FormatVersion, LockDays: a.LockDays, LockMode: a.LockMode}, nil
}

// ReceiptsSyncResult is what receipts sync shipped, as its --json prints
// it.
type ReceiptsSyncResult struct {
	Archive       string `json:"archive"`
	FormatVersion int    `json:"format_version"`
	Lines         int    `json:"lines"`
	// OK is false when the sync stopped on an error after reading lines.
	OK      bool `json:"ok"`
	Present int  `json:"present"`
	Shipped int  `json:"shipped"`
}

// ReceiptsSync ships every journal entry the configured S3 archive is
// missing. When it stops on an error after reading the journal, it
// returns both what it did and the error.
func ReceiptsSync(ctx context.Context, env *localapi.Env) (*ReceiptsSyncResult, error) {
	c, err := env.Config()
	if err != nil {
		return nil, err
	}
	if c.Archive.Bucket == "" {
		return nil, &config.Error{Path: c.Path, Msg: "no archive configured: set archive.bucket (and prefix) to sync receipts to S3"}
	}
	fl, err := localapi.OpenJournal(env)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	// Config hands the command to prod-write-net when this build lacks
	// env.AWS, so it is set here.
	res, err := env.AWS.SyncReceipts(ctx, c, fl)
	var ce *config.Error
	if errors.As(err, &ce) {
		return nil, err
	}
	// What was done, unless the archive could not even be listed.
	var r *ReceiptsSyncResult
	if err == nil || res.Lines > 0 {
		r = &ReceiptsSyncResult{Archive: res.URL, FormatVersion: localapi.FormatVersion, Lines: res.Lines, OK: err == nil, Present: res.Present, Shipped: res.Shipped}
	}
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, localapi.ErrArchiveConflict):
		return r, &localapi.DataError{Err: fmt.Errorf("receipts sync: %s", localapi.OneLine(err))}
	}
	return r, &localapi.ExitError{Code: localapi.ExitIOErr, Msg: "receipts sync: " + localapi.OneLine(err)}
}
