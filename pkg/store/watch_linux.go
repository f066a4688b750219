package store

import (
	"context"
	"errors"
	"fmt"

	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Watcher wakes a waiter when the evidence of one plan may have changed:
// `status --wait` judges again only then, never in a busy loop. On Linux
// it is inotify on the plan's evidence directory (and on evidence/, for
// when that directory is first made).
type Watcher struct {
	fd     int
	dir    string
	hasDir bool
}

// Watch starts watching the evidence of plan fp. Call it before reading
// the evidence: a change made between the read and [Watcher.Wait] is
// queued, so Wait returns at once and nothing is missed.
func (d *Dir) Watch(fp string) (*Watcher, error) {
	if err := CheckFingerprint(fp); err != nil {
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &Watcher{fd: fd, dir: filepath.Join(d.Root, "evidence", hexOf(fp))}
	if _, err := unix.InotifyAddWatch(fd, filepath.Join(d.Root, "evidence"), unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w.addDir()
	return w, nil
}

// evidenceMask: a record appears by rename (durable writes) or creation.
const evidenceMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_ONLYDIR

func (w *Watcher) addDir() {
	if w.hasDir {
		return
	}
	if _, err := unix.InotifyAddWatch(w.fd, w.dir, evidenceMask); err == nil {
		w.hasDir = true
	}
}

// Wait returns when something changed in the evidence, when until passes
// or when ctx ends, whichever is first; it returns ctx's error only.
func (w *Watcher) Wait(ctx context.Context, until time.Time) error {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		left := time.Until(until)
		if left <= 0 {
			return nil
		}
		// Poll in slices of at most 250 ms so that ctx is honoured.
		ms := min(left, 250*time.Millisecond).Milliseconds() + 1
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(ms))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil // fall back to the caller's bounded poll
		}
		if n == 0 {
			continue
		}
		// Drain what is queued: any event means "judge again".
		for {
			if _, err := unix.Read(w.fd, buf); err != nil {
				break
			}
		}
		if !w.hasDir {
			w.addDir()
		}
		return nil
	}
}

// Close stops watching.
func (w *Watcher) Close() error { return unix.Close(w.fd) }
