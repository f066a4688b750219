package plans

import (
	"context"
	"errors"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/store"
)

// How waiting for a decision wakes (docs/JSON.md, "status --wait"):
// with a watcher (inotify on the embedded store) it judges again on each
// change, and at least every WatchFallback in case a change went unseen
// (a filesystem without inotify, a store written over the network); with
// none (DynamoDB) it polls, from pollMin doubling to pollMax.
//
// Inside the runner service a wait also judges again when a reload
// (SIGHUP) replaces the policy and registry (Deps.Reloaded): it goes on,
// by the new ones.
var WatchFallback = 2 * time.Second // a variable for tests

const (
	pollMin = 200 * time.Millisecond
	pollMax = 5 * time.Second
)

// ErrWaitTimeout is a wait that ended with the request still pending.
var ErrWaitTimeout = errors.New("still pending")

// Wait judges plan fp until its request is no longer pending and returns
// that report; at deadline (when not zero) it returns the last report and
// ErrWaitTimeout; once ctx is done, the last report and ctx's error. tick
// is called with each pending report.
func Wait(ctx context.Context, d *Deps, fp string, deadline time.Time, dg operations.Digester, tick func(*Report)) (*Report, error) {
	c, err := d.Runner.Config()
	if err != nil {
		return nil, err
	}
	st, err := d.Runner.Store(c)
	if err != nil {
		return nil, err
	}
	var w *store.Watcher
	if dir, ok := st.(*store.Dir); ok {
		// Watching starts before the first judgement: a decision landing
		// in between wakes the first wait at once.
		if w, err = dir.Watch(fp); err != nil {
			w = nil // polled instead
		}
	}
	if w != nil {
		defer w.Close()
	}
	poll := pollMin
	for {
		// Taken before judging: a reload while judging wakes the wait.
		reloaded := d.reloaded()
		s, err := Status(d, fp, dg)
		if err != nil {
			return nil, err
		}
		if !api.StillPending(s.Refusal, s.Request) {
			return s, nil
		}
		now := d.Runner.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			return s, ErrWaitTimeout
		}
		if tick != nil {
			tick(s)
		}
		until := s.Request.Expires
		if !deadline.IsZero() && deadline.Before(until) {
			until = deadline
		}
		wctx, wake := wakeOn(ctx, reloaded)
		if w != nil {
			until = earliest(until, now.Add(WatchFallback))
			err = w.Wait(wctx, until)
		} else {
			until = earliest(until, now.Add(poll))
			poll = min(poll*2, pollMax)
			err = sleepUntil(wctx, until)
		}
		wake()
		if err != nil && ctx.Err() != nil {
			return s, ctx.Err()
		}
		// Otherwise woken, perhaps by a reload: judge again.
	}
}

// reloaded is d's reload channel now; nil (never closed) without one.
func (d *Deps) reloaded() <-chan struct{} {
	if d.Reloaded == nil {
		return nil
	}
	return d.Reloaded()
}

// wakeOn returns a context that is also done once ch is closed.
func wakeOn(ctx context.Context, ch <-chan struct{}) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(ctx)
	if ch != nil {
		go func() {
			select {
			case <-ch:
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	return wctx, cancel
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func sleepUntil(ctx context.Context, t time.Time) error {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
