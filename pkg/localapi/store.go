package localapi

import (
	"context"
	"errors"
	"time"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/receipts"
)

// shipTimeout bounds shipping a run's receipts: an unreachable archive
// must not hold a finished run for long, and they are shipped later by
// `receipts sync` anyway.
const shipTimeout = 10 * time.Second

// shipReceipts archives a run's receipts when an archive is configured.
// It is best effort and never fails the run: the receipts are in the
// journal already, which stays the write-ahead record; on failure one
// warning line says so and how to ship them later.
func (f *Env) shipReceipts(c *config.Config, entries ...receipts.Appended) {
	if c.Archive.Bucket == "" || len(entries) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shipTimeout)
	defer cancel()
	var seqs []any
	for _, e := range entries {
		seqs = append(seqs, e.Seq)
	}
	// Config hands a command whose configuration names an archive to
	// prod-write-net, so AWS is set here; if it is not, say so rather
	// than skip the archive quietly.
	err := errors.New("this build has no S3 archive backend")
	if f.AWS != nil {
		err = f.AWS.ShipReceipts(ctx, c, entries)
	}
	if err != nil {
		f.Warn("receipts %v are in the local journal but not archived (`prod-write receipts sync` ships them): %s", seqs, OneLine(err))
	}
}

// OneLine joins the lines of an error (errors.Join makes several).
func OneLine(err error) string {
	b := []byte(err.Error())
	for i, c := range b {
		if c == '\n' {
			b[i] = ';'
		}
	}
	return string(b)
}
