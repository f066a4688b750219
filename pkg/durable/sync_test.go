package durable_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/prod-write/prod-write/pkg/durable"
)

// syncEvent is one fsync, and what the target path held at that moment.
type syncEvent struct {
	what string // "file NAME" or "dir NAME", NAME relative to the test's directory
	data string // the synced file's bytes
	seen string // the target path's bytes, or "absent"
}

// recordSyncs makes durable.Sync record every fsync, with what path held
// then, until the test ends.
func recordSyncs(t *testing.T, root, path string) *[]syncEvent {
	t.Helper()
	var events []syncEvent
	orig := durable.Sync
	t.Cleanup(func() { durable.Sync = orig })
	durable.Sync = func(f *os.File) error {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f.Name())
		e := syncEvent{what: "file " + rel, seen: "absent"}
		if fi.IsDir() {
			e.what = "dir " + rel
		} else {
			b, _ := os.ReadFile(f.Name())
			e.data = string(b)
			if strings.Contains(rel, ".tmp-") {
				e.what = "file TEMP"
			}
		}
		if b, err := os.ReadFile(path); err == nil {
			e.seen = string(b)
		}
		events = append(events, e)
		return orig(f)
	}
	return &events
}

// TestDurableOrder: each write syncs the file's bytes before they can be
// seen under the path, and the directory after, so that once the function
// returns the path survives a crash with those bytes (restic's order:
// docs/adr/0003-durable-writes.md).
func TestDurableOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		old   bool // path exists beforehand, holding "old"
		write func(path string) error
		want  []syncEvent
	}{
		{"WriteFile", true, func(p string) error { return durable.WriteFile(p, []byte("new"), 0o600) }, []syncEvent{
			{"file TEMP", "new", "old"}, // before the rename
			{"dir .", "", "new"},        // after it
		}},
		{"CreateExclusive", false, func(p string) error { return durable.CreateExclusive(p, []byte("new"), 0o600, true) }, []syncEvent{
			{"file f", "new", "new"},
			{"dir .", "", "new"},
		}},
		{"CreateExclusive without sync", false, func(p string) error { return durable.CreateExclusive(p, []byte("new"), 0o600, false) }, nil},
		{"CreateOnce", false, func(p string) error { return durable.CreateOnce(p, []byte("new"), 0o600) }, []syncEvent{
			{"file TEMP", "new", "absent"}, // before the link
			{"dir .", "", "new"},           // after it
		}},
		{"SyncDir", false, func(p string) error { return durable.SyncDir(filepath.Dir(p)) }, []syncEvent{
			{"dir .", "", "absent"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if tc.old {
				if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			events := recordSyncs(t, dir, path)
			if err := tc.write(path); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(*events, tc.want) {
				t.Fatalf("fsyncs %+v, want %+v", *events, tc.want)
			}
		})
	}

	t.Run("MkdirAll", func(t *testing.T) {
		root := t.TempDir()
		events := recordSyncs(t, root, filepath.Join(root, "none"))
		if err := durable.MkdirAll(filepath.Join(root, "a", "b", "c"), 0o700); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range *events {
			got = append(got, e.what)
		}
		// Each new directory's entry, in its parent.
		if want := []string{"dir .", "dir a", "dir a/b"}; !slices.Equal(got, want) {
			t.Fatalf("fsyncs %q, want %q", got, want)
		}
	})
}

// TestDurableSyncFails: a failing fsync (EIO from a dying disk) fails the
// write, and a write whose bytes never reached the disk is not visible
// under its path.
func TestDurableSyncFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failDir bool // fail the directory's sync, not the file's
		write   func(path string) error
		left    string // what path holds afterwards
	}{
		{"WriteFile, file", false, func(p string) error { return durable.WriteFile(p, []byte("new"), 0o600) }, "old"},
		{"WriteFile, directory", true, func(p string) error { return durable.WriteFile(p, []byte("new"), 0o600) }, "new"},
		{"CreateOnce, file", false, func(p string) error { return durable.CreateOnce(p+"2", []byte("new"), 0o600) }, "old"},
		{"CreateOnce, directory", true, func(p string) error { return durable.CreateOnce(p+"2", []byte("new"), 0o600) }, "old"},
		{"CreateExclusive, file", false, func(p string) error { return durable.CreateExclusive(p+"2", []byte("new"), 0o600, true) }, "old"},
		{"CreateExclusive, directory", true, func(p string) error { return durable.CreateExclusive(p+"2", []byte("new"), 0o600, true) }, "old"},
		{"SyncDir", true, func(p string) error { return durable.SyncDir(filepath.Dir(p)) }, "old"},
		{"MkdirAll", true, func(p string) error { return durable.MkdirAll(filepath.Join(filepath.Dir(p), "d"), 0o700) }, "old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			orig := durable.Sync
			t.Cleanup(func() { durable.Sync = orig })
			durable.Sync = func(f *os.File) error {
				fi, err := f.Stat()
				if err == nil && fi.IsDir() == tc.failDir {
					return &os.PathError{Op: "sync", Path: f.Name(), Err: syscall.EIO}
				}
				return orig(f)
			}
			err := tc.write(path)
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("%s with a failing fsync: %v, want EIO", tc.name, err)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.left {
				t.Errorf("%s holds %q, want %q", path, b, tc.left)
			}
			if strings.HasPrefix(tc.name, "CreateOnce") {
				if _, err := os.Lstat(path + "2"); !tc.failDir && !errors.Is(err, os.ErrNotExist) {
					t.Errorf("CreateOnce left its path behind although its bytes were never synced: %v", err)
				}
			}
			if extra := leftovers(t, dir, "f", "f2", "d"); len(extra) > 0 {
				t.Errorf("temporary files left behind: %v", extra)
			}
		})
	}
}
