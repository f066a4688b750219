package execute

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rootOnlyTree makes a directory only root can change, nor any directory
// above it, or skips: the fixtures need root to own them.
func rootOnlyTree(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a directory only root can change needs root (CI is root)")
	}
	parent := "/var/lib/prod-write-tests"
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(parent, 0o755)
	dir, err := os.MkdirTemp(parent, "execute-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := RootOnly(dir + "/."); err == nil || !strings.Contains(err.Error(), "names a directory") {
		t.Fatalf("%s: want it to be root-only and a directory, got %v", dir, err)
	}
	return dir
}

// TestRootOnly: what the kernel walks to reach a program, symbolic links
// followed, must be root's and writable by no one else; the first
// component that is not is named. Attacker inputs: the program's path (the
// registry's), every directory and link on the way, and where links point.
func TestRootOnly(t *testing.T) {
	dir := rootOnlyTree(t)
	write := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	write(filepath.Join(dir, "bin", "ok"), 0o755)
	write(filepath.Join(dir, "share", "wrapper"), 0o755)
	must(t, os.Symlink("../share/wrapper", filepath.Join(dir, "bin", "relative-link")))
	must(t, os.Symlink(filepath.Join(dir, "share", "wrapper"), filepath.Join(dir, "bin", "absolute-link")))
	write(filepath.Join(dir, "bin", "group-writable"), 0o775)
	write(filepath.Join(dir, "bin", "others-own"), 0o755)
	must(t, os.Chown(filepath.Join(dir, "bin", "others-own"), 4242, 4242))
	write(filepath.Join(dir, "open", "prog"), 0o755)
	must(t, os.Chmod(filepath.Join(dir, "open"), 0o777))
	write(filepath.Join(dir, "sticky", "prog"), 0o755)
	must(t, os.Chmod(filepath.Join(dir, "sticky"), 0o1777))
	write(filepath.Join(dir, "theirs", "prog"), 0o755)
	must(t, os.Chown(filepath.Join(dir, "theirs"), 4242, 4242))
	must(t, os.Symlink("../open/prog", filepath.Join(dir, "bin", "link-into-open")))
	tmp := t.TempDir()
	write(filepath.Join(tmp, "prog"), 0o755)
	must(t, os.Symlink(filepath.Join(tmp, "prog"), filepath.Join(dir, "bin", "link-into-tmp")))
	must(t, os.Mkdir(filepath.Join(dir, "bin", "adir"), 0o755))

	for _, tc := range []struct {
		path string
		bad  string // "" for root-only; else what the error names
	}{
		{"bin/ok", ""},
		{"bin/relative-link", ""},
		{"bin/absolute-link", ""},
		{"bin/../bin/ok", ""},
		{"bin/group-writable", "bin/group-writable is writable"},
		{"bin/others-own", "owned by uid 4242"},
		{"open/prog", "/open is writable"},
		{"sticky/prog", "/sticky is writable"},
		{"theirs/prog", "/theirs is owned by uid 4242"},
		{"bin/link-into-open", "/open is writable"},
		{"bin/link-into-tmp", "writable by its group or others"},
		{"bin/adir", "names a directory"},
		{"bin/missing", "no such file"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			err := RootOnly(filepath.Join(dir, tc.path))
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("want root-only, got %v", err)
			case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
				t.Fatalf("want an error naming %q, got %v", tc.bad, err)
			}
		})
	}
	if err := RootOnly("bin/ok"); err == nil {
		t.Fatal("a relative path is root-only")
	}
}

// TestByPath: a program only root can change is executed by its path,
// and only while it is the very file that was hashed: replaced by a
// rename, or rewritten in place, after the snapshot, it runs from the
// snapshot (the bytes that were approved).
func TestByPath(t *testing.T) {
	dir := rootOnlyTree(t)
	prog := filepath.Join(dir, "prog")
	must(t, os.WriteFile(prog, []byte("#!/bin/sh\necho \"zero=$0\"\n"), 0o755))
	snap, err := TakeSnapshot(prog, -1, true, nil)
	must(t, err)
	defer snap.Close()
	if got := ByPath(snap, prog); got != prog {
		t.Fatalf("ByPath = %q, want %q", got, prog)
	}

	// Run by path, $0 is the path; from the snapshot, /proc/self/fd/3.
	for _, tc := range []struct{ path, want string }{{prog, "zero=" + prog}, {"", "zero=" + programPath}} {
		var out bytes.Buffer
		res, err := Run(Spec{Program: snap, Path: tc.path, Argv: []string{prog}, Dir: "/", Stdout: &out})
		must(t, err)
		if res.ExitCode != 0 || strings.TrimSpace(out.String()) != tc.want {
			t.Fatalf("Path %q: exit %d, %q; want %q", tc.path, res.ExitCode, out.String(), tc.want)
		}
	}

	// Rewritten in place (the same inode).
	f, err := os.OpenFile(prog, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString("echo changed\n")
	must(t, err)
	must(t, f.Close())
	if got := ByPath(snap, prog); got != "" {
		t.Fatalf("rewritten in place: ByPath = %q, want the snapshot", got)
	}
	if err := snap.IsAt(prog); !errors.Is(err, ErrChanged) {
		t.Fatalf("IsAt = %v, want ErrChanged", err)
	}

	// Replaced by a rename.
	snap2, err := TakeSnapshot(prog, -1, true, nil)
	must(t, err)
	defer snap2.Close()
	must(t, os.WriteFile(prog+".new", []byte("#!/bin/sh\necho other\n"), 0o755))
	must(t, os.Rename(prog+".new", prog))
	if got := ByPath(snap2, prog); got != "" {
		t.Fatalf("replaced: ByPath = %q, want the snapshot", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkByPath is what deciding to run by path adds to a run: the walk
// of RootOnly and the stat of IsAt (a symbolic link on the way, as
// Debian's /usr/bin/psql has).
func BenchmarkByPath(b *testing.B) {
	prog := "/usr/bin/psql"
	if _, err := os.Stat(prog); err != nil {
		prog = "/bin/sh"
	}
	snap, err := TakeSnapshot(prog, -1, true, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer snap.Close()
	for b.Loop() {
		if ByPath(snap, prog) == "" {
			b.Fatal("not by path")
		}
	}
}
