// Package durable holds the one way prod-write writes anything that must
// survive a crash: write to a temporary file in the target directory, fsync
// it, rename it into place, fsync the directory. Files that must never be
// overwritten are created with O_EXCL instead.
//
// See docs/adr/0003-durable-writes.md.
package durable

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CreateTemp is the function used to make temporary files. Tests replace it
// to simulate a full disk or a failing device.
var CreateTemp = os.CreateTemp

// Sync fsyncs an open file or directory: every fsync of this package goes
// through it. Tests replace it to fail as a dying disk does, or to record
// what is synced and when.
var Sync = (*os.File).Sync

// WriteFile atomically replaces path with data: readers see either the old
// content or the new one, never a mix, and after WriteFile returns the new
// content survives a crash.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return replace(path, data, perm, nil)
}

// Owner is a file's owner and group, by number.
type Owner struct{ UID, GID int }

// WriteFileOwned is [WriteFile] for a file that must keep its owner and
// group: the new file is given owner before it replaces path, so that no
// reader ever sees path owned by the writer instead (a file root writes
// and the service's group reads). Changing the owner needs the privilege
// chown(2) asks for; without it nothing is replaced.
func WriteFileOwned(path string, data []byte, perm os.FileMode, owner Owner) error {
	return replace(path, data, perm, &owner)
}

func replace(path string, data []byte, perm os.FileMode, owner *Owner) error {
	dir := filepath.Dir(path)
	f, err := CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating temporary file for %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := writeAll(f, data); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if owner != nil {
		// Before the mode: chown(2) may clear the set-id bits.
		if err := f.Chown(owner.UID, owner.GID); err != nil {
			return fmt.Errorf("setting owner of %s: %w", tmp, err)
		}
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("setting mode of %s: %w", tmp, err)
	}
	if err := Sync(f); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming into %s: %w", path, err)
	}
	ok = true
	return SyncDir(dir)
}

// CreateExclusive creates path with data, failing with an error that
// matches [os.ErrExist] when path already exists. It is the mechanism behind
// every single-use guarantee of the embedded store: of any number of
// concurrent callers for one path, exactly one succeeds.
//
// When sync is false the file and directory are not fsynced; the caller
// takes responsibility for syncing (see [SyncDir]) before relying on it.
func CreateExclusive(path string, data []byte, perm os.FileMode, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err // *PathError wrapping ErrExist when taken.
	}
	if err := writeAll(f, data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if sync {
		if err := Sync(f); err != nil {
			f.Close()
			return fmt.Errorf("syncing %s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", path, err)
	}
	if sync {
		return SyncDir(filepath.Dir(path))
	}
	return nil
}

// CreateOnce creates path with data, complete or not at all: the bytes
// are written and fsynced in a temporary file, which is then hard-linked
// into place (link(2) fails if path exists) and the directory fsynced.
// Unlike [CreateExclusive], a reader never sees path empty or half
// written, and a crash never leaves it so. It fails with an error matching
// [os.ErrExist] when path exists.
func CreateOnce(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating temporary file for %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := writeAll(f, data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := Sync(f); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp, path); err != nil {
		return err // *LinkError wrapping ErrExist when taken.
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so that entries created or renamed in it
// survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := Sync(d); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// MkdirAll creates dir and its missing parents with perm, and fsyncs each
// parent whose entries changed.
func MkdirAll(dir string, perm os.FileMode) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	// Sync the parent even when another process won the race to create
	// dir: it may not have synced yet, and the caller is about to rely on
	// dir's entry.
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return SyncDir(parent)
}

func writeAll(w io.Writer, data []byte) error {
	n, err := w.Write(data)
	if err == nil && n != len(data) {
		err = io.ErrShortWrite
	}
	return err
}
