//go:build !linux

package store

import (
	"context"
	"errors"
	"time"
)

// Watcher is inotify's on Linux ([Dir.Watch] there). Elsewhere there is
// no watch: [Dir.Watch] returns [ErrNoWatch] and `status --wait` polls
// with backoff, as it does on DynamoDB (docs/adr/0020-decision-requests.md).
type Watcher struct{}

// ErrNoWatch is [Dir.Watch]'s error where the system offers no watch that
// prod-write uses: the caller polls.
var ErrNoWatch = errors.New("watching the state directory needs Linux's inotify: polling instead")

// Watch returns ErrNoWatch: the caller falls back to polling.
func (d *Dir) Watch(fp string) (*Watcher, error) {
	if err := CheckFingerprint(fp); err != nil {
		return nil, err
	}
	return nil, ErrNoWatch
}

// Wait is never reached (Watch returns no Watcher); it returns at until
// or when ctx ends, so a caller that did reach it would poll.
func (w *Watcher) Wait(ctx context.Context, until time.Time) error {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Close does nothing.
func (w *Watcher) Close() error { return nil }
