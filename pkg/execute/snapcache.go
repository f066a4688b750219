package execute

import (
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SnapshotCache keeps the sealed snapshots of programs for a process that
// runs many (the runner service), so that a run of an unchanged program does
// not copy and hash it again (docs/PERFORMANCE.md).
//
// What runs is still exactly the bytes that were hashed: a hit hands out a
// new read-only descriptor of the same sealed memfd, whose digest is the one
// the fingerprint is checked against. What the cache adds is the claim that
// those bytes are still the file's. It makes that claim only when the file,
// opened again now, has the same device, inode, size, mode, owner, mtime and
// ctime as when it was copied, and only for files whose last change (ctime)
// was at least Settle before the copy began: the kernel stamps ctime from a
// coarse clock, so a write in the same tick as an earlier one can leave it
// unchanged (git's "racy" files), and a file that has not changed for Settle
// cannot be written again without its ctime moving forward. ctime cannot be
// set by any system call; only moving the system clock back could defeat
// this, which needs root.
type SnapshotCache struct {
	// Settle is how long a file must have been unchanged before the copy
	// for its snapshot to be kept (default one second).
	Settle time.Duration
	// Max is how many snapshots are kept (default 64); the least recently
	// used is dropped first.
	Max int

	mu    sync.Mutex
	m     map[fileID]*cachedSnapshot
	bytes int64 // of the snapshots kept
	tick  uint64
	hits  uint64
}

type fileID struct {
	dev, ino     uint64
	size         int64
	mode         uint32
	uid, gid     uint32
	mtime, ctime unix.Timespec
	exec         bool
}

type cachedSnapshot struct {
	snap *Snapshot
	used uint64
}

// maxCachedSize bounds each snapshot kept, and maxCachedBytes all of them:
// programs are small; a larger one is snapshotted every time.
const (
	maxCachedSize  = 64 << 20
	maxCachedBytes = 256 << 20
)

// Take is [TakeSnapshot], answered from the cache when the file is
// unchanged. The caller owns the snapshot returned and closes it.
func (c *SnapshotCache) Take(path string, max int64, exec bool) (*Snapshot, error) {
	src, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return nil, err
	}
	id := fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mode: st.Mode, uid: st.Uid, gid: st.Gid, mtime: st.Mtim, ctime: st.Ctim, exec: exec}
	if snap, ok := c.lookup(id, max); ok {
		return snap, nil
	}
	began := time.Now()
	snap, err := SnapshotFile(src, path, max, exec, nil)
	if err != nil {
		return nil, err
	}
	settle := c.Settle
	if settle == 0 {
		settle = time.Second
	}
	var after unix.Stat_t
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size <= maxCachedSize &&
		time.Unix(st.Ctim.Unix()).Add(settle).Before(began) &&
		unix.Fstat(int(src.Fd()), &after) == nil && after.Ctim == st.Ctim && after.Mtim == st.Mtim && after.Size == st.Size {
		c.keep(id, snap)
	}
	return snap, nil
}

// Hits is how many snapshots the cache has answered.
func (c *SnapshotCache) Hits() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

func (c *SnapshotCache) lookup(id fileID, max int64) (*Snapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || (max >= 0 && e.snap.Size > max) {
		return nil, false
	}
	snap, err := e.snap.reopen()
	if err != nil {
		return nil, false
	}
	c.tick++
	e.used = c.tick
	c.hits++
	return snap, true
}

// keep stores a reopened copy of snap: the caller closes its own.
func (c *SnapshotCache) keep(id fileID, snap *Snapshot) {
	own, err := snap.reopen()
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[fileID]*cachedSnapshot{}
	}
	if _, ok := c.m[id]; ok {
		c.drop(id)
	}
	max := c.Max
	if max <= 0 {
		max = 64
	}
	for len(c.m) > 0 && (len(c.m) >= max || c.bytes+own.Size > maxCachedBytes) {
		var lru fileID
		var least uint64 = ^uint64(0)
		for k, e := range c.m {
			if e.used < least {
				lru, least = k, e.used
			}
		}
		c.drop(lru)
	}
	c.tick++
	c.m[id] = &cachedSnapshot{snap: own, used: c.tick}
	c.bytes += own.Size
}

// drop closes and forgets one snapshot; c.mu is held.
func (c *SnapshotCache) drop(id fileID) {
	c.bytes -= c.m[id].snap.Size
	c.m[id].snap.Close()
	delete(c.m, id)
}

// Purge drops every snapshot kept (the service's policy was reloaded: what
// it runs is read afresh).
func (c *SnapshotCache) Purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.m {
		c.drop(id)
	}
}

// reopen opens a new read-only descriptor of the same sealed memfd, with its
// own offset.
func (s *Snapshot) reopen() (*Snapshot, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", s.File.Fd()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &Snapshot{File: os.NewFile(uintptr(fd), s.File.Name()), Size: s.Size, SHA256: s.SHA256, source: s.source}, nil
}
