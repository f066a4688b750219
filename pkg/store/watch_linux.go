package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watcher wakes a waiter when the evidence of one plan may have changed:
// `status --wait` judges again only then, never in a busy loop. On Linux
// it is inotify on the plan's evidence directory (and on evidence/, for
// when that directory is first made).
//
// One inotify instance serves every waiter of a store in a process (a
// hub), whatever their number: the kernel allows an account few instances
// (fs.inotify.max_user_instances, 128 by default), and the runner service
// holds one wait per agent waiting on a decision
// (docs/adr/0031-waits-through-the-service.md).
type Watcher struct {
	h   *hub
	hex string
	// woken holds one wake-up: a change between Watch and Wait is kept.
	woken chan struct{}
}

// hub is one inotify instance and the waiters it wakes.
type hub struct {
	fd   int
	root string // evidence/ of the store
	mu   sync.Mutex
	// evidenceWD is the watch on evidence/ itself; dirs maps each watch
	// of a plan's directory to its hex, and wds the other way round.
	evidenceWD int32
	dirs       map[int32]string
	wds        map[string]int32
	waiters    map[string]map[*Watcher]struct{}
	// closed: the instance failed and its descriptor is closed (and its
	// number perhaps another's now).
	closed bool
}

var (
	hubsMu sync.Mutex
	hubs   = map[string]*hub{}
)

// hubOf is the hub of the store rooted at root, started on first use.
func hubOf(root string) (*hub, error) {
	evidence := filepath.Join(filepath.Clean(root), "evidence")
	hubsMu.Lock()
	defer hubsMu.Unlock()
	if h, ok := hubs[evidence]; ok {
		return h, nil
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	wd, err := unix.InotifyAddWatch(fd, evidence, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify: %w", err)
	}
	h := &hub{fd: fd, root: evidence, evidenceWD: int32(wd), dirs: map[int32]string{}, wds: map[string]int32{}, waiters: map[string]map[*Watcher]struct{}{}}
	hubs[evidence] = h
	go h.read()
	return h, nil
}

// Watch starts watching the evidence of plan fp. Call it before reading
// the evidence: a change made between the read and [Watcher.Wait] is
// kept, so Wait returns at once and nothing is missed.
func (d *Dir) Watch(fp string) (*Watcher, error) {
	if err := CheckFingerprint(fp); err != nil {
		return nil, err
	}
	h, err := hubOf(d.Root)
	if err != nil {
		return nil, err
	}
	w := &Watcher{h: h, hex: hexOf(fp), woken: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters[w.hex] == nil {
		h.waiters[w.hex] = map[*Watcher]struct{}{}
	}
	h.waiters[w.hex][w] = struct{}{}
	h.watchDirLocked(w.hex)
	return w, nil
}

// evidenceMask: a record appears by rename (durable writes) or creation.
const evidenceMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_ONLYDIR

// watchDirLocked watches the evidence directory of hex, if it exists and
// is not watched yet (until it exists, the watch on evidence/ sees it
// made).
func (h *hub) watchDirLocked(hex string) {
	if _, ok := h.wds[hex]; ok || h.closed {
		return
	}
	wd, err := unix.InotifyAddWatch(h.fd, filepath.Join(h.root, hex), evidenceMask)
	if err != nil {
		return
	}
	h.dirs[int32(wd)], h.wds[hex] = hex, int32(wd)
}

// read wakes the waiters of each event, for as long as the process lives.
func (h *hub) read() {
	buf := make([]byte, 256*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := unix.Read(h.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			// The instance failed: wake everyone, for good. Their
			// waits fall back to the caller's bounded poll.
			h.mu.Lock()
			for _, ws := range h.waiters {
				for w := range ws {
					w.wake()
				}
			}
			h.failedLocked()
			h.mu.Unlock()
			return
		}
		h.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				for i, c := range raw {
					if c == 0 {
						raw = raw[:i]
						break
					}
				}
				name = string(raw)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				for _, ws := range h.waiters {
					for w := range ws {
						w.wake()
					}
				}
			case ev.Wd == h.evidenceWD && ev.Mask&unix.IN_IGNORED != 0:
				// evidence/ itself went away: this instance sees no
				// more. Wake everyone; the next Watch starts a new hub.
				for _, ws := range h.waiters {
					for w := range ws {
						w.wake()
					}
				}
				h.failedLocked()
				h.mu.Unlock()
				return
			case ev.Wd == h.evidenceWD:
				// A plan's evidence directory was made: watch it if
				// anyone waits on that plan, and wake them.
				if ws := h.waiters[name]; len(ws) > 0 {
					h.watchDirLocked(name)
					for w := range ws {
						w.wake()
					}
				}
			default:
				hex, ok := h.dirs[ev.Wd]
				if !ok {
					continue
				}
				if ev.Mask&unix.IN_IGNORED != 0 {
					delete(h.dirs, ev.Wd)
					delete(h.wds, hex)
				}
				for w := range h.waiters[hex] {
					w.wake()
				}
			}
		}
		h.mu.Unlock()
	}
}

// failedLocked forgets the hub, so that the next Watch starts a new one.
func (h *hub) failedLocked() {
	hubsMu.Lock()
	if hubs[h.root] == h {
		delete(hubs, h.root)
	}
	hubsMu.Unlock()
	h.closed = true
	unix.Close(h.fd)
}

// wake sends w its wake-up, unless one is already waiting.
func (w *Watcher) wake() {
	select {
	case w.woken <- struct{}{}:
	default:
	}
}

// Wait returns when something changed in the evidence, when until passes
// or when ctx ends, whichever is first; it returns ctx's error only.
func (w *Watcher) Wait(ctx context.Context, until time.Time) error {
	left := time.Until(until)
	if left <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.woken:
		return nil
	case <-t.C:
		return nil
	}
}

// Close stops watching: the last waiter of a plan removes the watch on
// its directory.
func (w *Watcher) Close() error {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.waiters[w.hex]
	delete(ws, w)
	if len(ws) > 0 {
		return nil
	}
	delete(h.waiters, w.hex)
	if wd, ok := h.wds[w.hex]; ok {
		delete(h.wds, w.hex)
		delete(h.dirs, wd)
		if !h.closed {
			unix.InotifyRmWatch(h.fd, uint32(wd))
		}
	}
	return nil
}
