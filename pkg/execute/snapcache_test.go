package execute

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func readAll(t *testing.T, s *Snapshot) []byte {
	t.Helper()
	b, err := io.ReadAll(s.File)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// settled writes a file and waits until its ctime is older than settle, as
// an installed program's is.
func settled(t *testing.T, path string, data []byte, settle time.Duration) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(settle + 50*time.Millisecond)
}

// An unchanged program is answered from the cache with the same sealed
// bytes, through a descriptor of its own; any change to the file (bytes,
// size, mode, replacement by rename) is a miss that snapshots the new
// bytes. What the caller can change here is the file at the path; it cannot
// make a snapshot hand out bytes other than those hashed.
func TestSnapshotCache(t *testing.T) {
	const settle = 200 * time.Millisecond
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	v1 := []byte("#!/bin/sh\necho one\n")
	settled(t, prog, v1, settle)
	c := &SnapshotCache{Settle: settle}

	take := func() *Snapshot {
		t.Helper()
		s, err := c.Take(prog, -1, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a := take()
	b := take()
	if c.Hits() != 1 {
		t.Fatalf("hits %d after two takes of an unchanged file, want 1", c.Hits())
	}
	if a.SHA256 != digestOf(v1) || b.SHA256 != digestOf(v1) {
		t.Fatalf("digests %s %s, want %s", a.SHA256, b.SHA256, digestOf(v1))
	}
	// Each has its own offset: reading one does not move the other.
	if got := readAll(t, a); string(got) != string(v1) {
		t.Fatalf("first snapshot reads %q", got)
	}
	if got := readAll(t, b); string(got) != string(v1) {
		t.Fatalf("cached snapshot reads %q", got)
	}
	// Closing what a caller got leaves the cache's own copy usable.
	a.Close()
	if got := readAll(t, take()); string(got) != string(v1) {
		t.Fatalf("after a caller closed its copy, the cache hands out %q", got)
	}

	for _, change := range []struct {
		name string
		do   func() []byte
	}{
		{"same size, new bytes, in place", func() []byte {
			v := []byte("#!/bin/sh\necho two\n")
			f, err := os.OpenFile(prog, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(v, 0)
			f.Close()
			return v
		}},
		{"same size, new bytes, mtime put back (only ctime tells)", func() []byte {
			fi, err := os.Stat(prog)
			if err != nil {
				t.Fatal(err)
			}
			v := []byte("#!/bin/sh\necho 2ow\n")
			f, err := os.OpenFile(prog, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(v, 0)
			f.Close()
			if err := os.Chtimes(prog, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
			return v
		}},
		{"mode", func() []byte {
			b, _ := os.ReadFile(prog)
			os.Chmod(prog, 0o700)
			return b
		}},
		{"replaced by rename", func() []byte {
			v := []byte("#!/bin/sh\necho three, longer\n")
			tmp := filepath.Join(dir, "tmp")
			os.WriteFile(tmp, v, 0o755)
			if err := os.Rename(tmp, prog); err != nil {
				t.Fatal(err)
			}
			return v
		}},
	} {
		hits := c.Hits()
		want := change.do()
		s := take()
		if c.Hits() != hits {
			t.Fatalf("%s: answered from the cache", change.name)
		}
		if s.SHA256 != digestOf(want) || string(readAll(t, s)) != string(want) {
			t.Fatalf("%s: snapshot %s, want %s", change.name, s.SHA256, digestOf(want))
		}
		time.Sleep(settle + 50*time.Millisecond)
		take() // kept now that it has settled
	}
}

// A file changed within Settle before its copy is never kept: its ctime
// could stay the same across a second write in the same clock tick.
func TestSnapshotCacheRacyFile(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(prog, []byte("fresh"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &SnapshotCache{Settle: time.Hour}
	for i := 0; i < 3; i++ {
		s, err := c.Take(prog, -1, true)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if c.Hits() != 0 {
		t.Fatalf("a file changed just now was answered from the cache %d times", c.Hits())
	}
}

// The cache keeps at most Max snapshots, dropping the least recently used,
// and a limit smaller than a kept snapshot is a miss that reports the size.
func TestSnapshotCacheBounds(t *testing.T) {
	const settle = 100 * time.Millisecond
	dir := t.TempDir()
	var paths []string
	for _, n := range []string{"a", "b", "c"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte("program "+n), 0o755); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	time.Sleep(settle + 50*time.Millisecond)
	c := &SnapshotCache{Settle: settle, Max: 2}
	take := func(p string, max int64) error {
		s, err := c.Take(p, max, true)
		if err == nil {
			s.Close()
		}
		return err
	}
	take(paths[0], -1)
	take(paths[1], -1)
	take(paths[0], -1) // a is now more recent than b
	take(paths[2], -1) // drops b
	hits := c.Hits()
	take(paths[0], -1)
	take(paths[2], -1)
	if c.Hits() != hits+2 {
		t.Fatalf("a and c should be kept")
	}
	take(paths[1], -1)
	if c.Hits() != hits+2 {
		t.Fatalf("b should have been dropped")
	}
	var tl *TooLargeError
	if err := take(paths[0], 3); err == nil || !errors.As(err, &tl) {
		t.Fatalf("a limit below a cached snapshot's size: %v", err)
	}
}

// The bytes kept are bounded as well as the count, and Purge drops all.
func TestSnapshotCacheBytesAndPurge(t *testing.T) {
	const settle = 100 * time.Millisecond
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxCachedSize+1), 0o755); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("small"), 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(settle + 50*time.Millisecond)
	c := &SnapshotCache{Settle: settle}
	for i := 0; i < 2; i++ {
		for _, p := range []string{big, small} {
			s, err := c.Take(p, -1, true)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
		}
	}
	if c.Hits() != 1 || c.bytes != 5 {
		t.Fatalf("hits %d, bytes kept %d: want only the small program kept", c.Hits(), c.bytes)
	}
	c.Purge()
	s, err := c.Take(small, -1, true)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if c.Hits() != 1 {
		t.Fatal("a purged snapshot was answered from the cache")
	}
}
