package durable_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/prod-write/prod-write/pkg/durable"
)

// leftovers lists the entries of dir other than keep.
func leftovers(t *testing.T, dir string, keep ...string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		found := false
		for _, k := range keep {
			if e.Name() == k {
				found = true
			}
		}
		if !found {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestWriteFileReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := durable.WriteFile(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := durable.WriteFile(path, []byte("two, longer"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "two, longer" {
		t.Fatalf("content %q, %v; want the second write", got, err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %04o, want 0640", fi.Mode().Perm())
	}
	if extra := leftovers(t, dir, "state.json"); len(extra) > 0 {
		t.Errorf("temporary files left behind: %v", extra)
	}
	// An empty write is a write.
	if err := durable.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); len(got) != 0 {
		t.Errorf("content %q after writing nothing", got)
	}
}

// WriteFileOwned gives the new file the owner and group asked for, and
// the mode, before it takes path's place: a reader never sees it owned by
// the writer. Without the privilege to chown, path is left as it was.
func TestWriteFileOwned(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.toml")
	if err := os.WriteFile(path, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	err := durable.WriteFileOwned(path, []byte("new"), 0o640, durable.Owner{UID: 65534, GID: 65534})
	if os.Geteuid() != 0 {
		if err == nil {
			t.Fatal("a chown to another account succeeded without root")
		}
		if got, _ := os.ReadFile(path); string(got) != "old" {
			t.Errorf("content %q after a failed write, want the old", got)
		}
		if extra := leftovers(t, dir, "tokens.toml"); len(extra) > 0 {
			t.Errorf("temporary files left behind: %v", extra)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 65534 || st.Gid != 65534 || fi.Mode().Perm() != 0o640 {
		t.Errorf("owner %d:%d mode %04o, want 65534:65534 0640", st.Uid, st.Gid, fi.Mode().Perm())
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Errorf("content %q, want the new", got)
	}
	if extra := leftovers(t, dir, "tokens.toml"); len(extra) > 0 {
		t.Errorf("temporary files left behind: %v", extra)
	}
}

// TestWriteFileFailures makes the temporary file fail in the ways a full
// or failing disk does, and checks the old content survives and no
// temporary file is left behind.
func TestWriteFileFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		temp func(dir, pattern string) (*os.File, error)
	}{
		{"temp file cannot be created (ENOSPC)", func(dir, pattern string) (*os.File, error) {
			return nil, &os.PathError{Op: "open", Path: filepath.Join(dir, pattern), Err: syscall.ENOSPC}
		}},
		{"writes to the temp file fail", func(dir, pattern string) (*os.File, error) {
			// A real temp file in the target directory, handed back
			// read-only: every write fails, as on a full disk, and the
			// name is real so cleanup must remove it.
			f, err := os.CreateTemp(dir, pattern)
			if err != nil {
				return nil, err
			}
			name := f.Name()
			f.Close()
			return os.Open(name)
		}},
		{"temp file closed under the writer", func(dir, pattern string) (*os.File, error) {
			f, err := os.CreateTemp(dir, pattern)
			if err != nil {
				return nil, err
			}
			f.Close()
			return f, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "receipts.jsonl")
			if err := os.WriteFile(path, []byte("old content\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			orig := durable.CreateTemp
			t.Cleanup(func() { durable.CreateTemp = orig })
			var asked []string
			durable.CreateTemp = func(d, pattern string) (*os.File, error) {
				asked = append(asked, d)
				return tc.temp(d, pattern)
			}

			err := durable.WriteFile(path, bytes.Repeat([]byte("new "), 1000), 0o600)
			if err == nil {
				t.Fatal("WriteFile succeeded on a failing disk")
			}
			if !strings.Contains(err.Error(), path) && !strings.Contains(err.Error(), ".receipts.jsonl.tmp-") {
				t.Errorf("error %q names neither the file nor its temporary", err)
			}
			if len(asked) != 1 || asked[0] != dir {
				t.Errorf("temporary file asked for in %v, want once in the target directory %s", asked, dir)
			}
			got, _ := os.ReadFile(path)
			if string(got) != "old content\n" {
				t.Errorf("old content lost: %q", got)
			}
			if extra := leftovers(t, dir, "receipts.jsonl"); len(extra) > 0 {
				t.Errorf("temporary files left behind: %v", extra)
			}
		})
	}
}

func TestWriteFileNoDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "f")
	if err := durable.WriteFile(path, []byte("x"), 0o600); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WriteFile into a missing directory: %v, want os.ErrNotExist", err)
	}
}

func TestCreateExclusive(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "slot")
			if err := durable.CreateExclusive(path, []byte("first"), 0o600, sync); err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(path)
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %04o, want 0600", fi.Mode().Perm())
			}
			err := durable.CreateExclusive(path, []byte("second"), 0o600, sync)
			if !errors.Is(err, os.ErrExist) {
				t.Fatalf("second CreateExclusive: %v, want os.ErrExist", err)
			}
			if got, _ := os.ReadFile(path); string(got) != "first" {
				t.Errorf("content %q, want the first write untouched", got)
			}
			// A symlink, even dangling, is an existing path.
			link := filepath.Join(dir, "link")
			if err := os.Symlink(filepath.Join(dir, "target"), link); err != nil {
				t.Fatal(err)
			}
			if err := durable.CreateExclusive(link, []byte("x"), 0o600, sync); !errors.Is(err, os.ErrExist) {
				t.Errorf("CreateExclusive through a dangling symlink: %v, want os.ErrExist", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "target")); err == nil {
				t.Error("CreateExclusive wrote through a symlink")
			}
		})
	}
}

// TestCreateExclusiveRace: of many concurrent creators of one path,
// exactly one wins; the rest see os.ErrExist (the single-use guarantee).
func TestCreateExclusiveRace(t *testing.T) {
	for round := 0; round < 20; round++ {
		path := filepath.Join(t.TempDir(), "consumed")
		const n = 32
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = durable.CreateExclusive(path, []byte(fmt.Sprint(i)), 0o600, true)
			}()
		}
		close(start)
		wg.Wait()
		wins, winner := 0, -1
		for i, err := range errs {
			switch {
			case err == nil:
				wins++
				winner = i
			case !errors.Is(err, os.ErrExist):
				t.Fatalf("creator %d: %v", i, err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d creators succeeded, want exactly 1", wins)
		}
		if got, _ := os.ReadFile(path); string(got) != fmt.Sprint(winner) {
			t.Fatalf("file holds %q, want the winner's %d", got, winner)
		}
	}
}

func TestMkdirAll(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	if err := durable.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(root, "a"), deep} {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() || fi.Mode().Perm()&^0o700 != 0 {
			t.Errorf("%s: %v, %v", d, fi.Mode(), err)
		}
	}
	if err := durable.MkdirAll(deep, 0o700); err != nil {
		t.Errorf("MkdirAll of an existing directory: %v", err)
	}
	file := filepath.Join(root, "file")
	os.WriteFile(file, nil, 0o600)
	if err := durable.MkdirAll(file, 0o700); err == nil {
		t.Error("MkdirAll over a regular file succeeded")
	}
}

// CreateOnce: of many concurrent creators exactly one wins, and a reader
// never sees the file empty or partial.
func TestCreateOnceIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "record")
	data := bytes.Repeat([]byte("x"), 64<<10)
	var wg sync.WaitGroup
	var wins, exists atomic.Int32
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if b, err := os.ReadFile(path); err == nil && !bytes.Equal(b, data) {
				t.Errorf("a reader saw %d bytes", len(b))
				return
			}
		}
	}()
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := durable.CreateOnce(path, data, 0o600)
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, os.ErrExist):
				exists.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	if wins.Load() != 1 || exists.Load() != 15 {
		t.Fatalf("%d wins, %d ErrExist", wins.Load(), exists.Load())
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}
