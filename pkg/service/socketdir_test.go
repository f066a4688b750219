package service

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mkdirMode makes dir with exactly mode, whatever the umask.
func mkdirMode(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The socket's directory is configuration, and serve is privileged: a
// missing one is created 0755 whatever the umask, and one that another
// account could write, own or plant in the way is refused before anything
// is bound, chmod'ed or created in it.
func TestListenSocketDir(t *testing.T) {
	old := syscall.Umask(0o077) // as serve runs
	t.Cleanup(func() { syscall.Umask(old) })
	uid := os.Getuid()

	t.Run("missing_is_created_0755", func(t *testing.T) {
		base := t.TempDir()
		sock := filepath.Join(base, "run", "pw.sock")
		l, err := Listen(sock, 0o660)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		fi, err := os.Lstat(filepath.Dir(sock))
		if err != nil || fi.Mode() != os.ModeDir|0o755 || fi.Sys().(*syscall.Stat_t).Uid != uint32(uid) {
			t.Errorf("the socket's directory: %v %v, want ours with mode 0755", fi.Mode(), err)
		}
		if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
			t.Errorf("the socket: %v %v", fi, err)
		}
	})
	t.Run("missing_under_a_sticky_parent_is_created", func(t *testing.T) {
		parent := mkdirMode(t, filepath.Join(t.TempDir(), "tmp"), os.ModeSticky|0o777)
		if err := PrepareSocketDir(filepath.Join(parent, "run", "pw.sock"), uid); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("through_a_symlink_in_a_checked_directory", func(t *testing.T) {
		base := t.TempDir()
		real := mkdirMode(t, filepath.Join(base, "real"), 0o755)
		if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
			t.Fatal(err)
		}
		l, err := Listen(filepath.Join(base, "link", "pw.sock"), 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := os.Lstat(filepath.Join(real, "pw.sock")); err != nil {
			t.Error(err)
		}
	})

	for _, tc := range []struct {
		name string
		// setup returns the socket path, and a directory that must stay
		// empty.
		setup func(t *testing.T, base string) (sock, untouched string)
		root  bool // needs root, to give a directory to another account
	}{
		{name: "dir_writable_by_others", setup: func(t *testing.T, base string) (string, string) {
			d := mkdirMode(t, filepath.Join(base, "run"), 0o777)
			return filepath.Join(d, "pw.sock"), d
		}},
		{name: "dir_writable_by_group", setup: func(t *testing.T, base string) (string, string) {
			d := mkdirMode(t, filepath.Join(base, "run"), 0o775)
			return filepath.Join(d, "pw.sock"), d
		}},
		{name: "dir_sticky_and_writable_by_others", setup: func(t *testing.T, base string) (string, string) {
			d := mkdirMode(t, filepath.Join(base, "run"), os.ModeSticky|0o777)
			return filepath.Join(d, "pw.sock"), d
		}},
		{name: "missing_dir_under_a_parent_others_write", setup: func(t *testing.T, base string) (string, string) {
			p := mkdirMode(t, filepath.Join(base, "shared"), 0o777)
			return filepath.Join(p, "run", "pw.sock"), p
		}},
		{name: "existing_dir_under_a_parent_others_write", setup: func(t *testing.T, base string) (string, string) {
			p := mkdirMode(t, filepath.Join(base, "shared"), 0o777)
			d := mkdirMode(t, filepath.Join(p, "run"), 0o755)
			return filepath.Join(d, "pw.sock"), d
		}},
		{name: "symlink_planted_in_a_parent_others_write", setup: func(t *testing.T, base string) (string, string) {
			// The link leads to a directory that would pass: the link
			// itself could be swapped after the check.
			target := mkdirMode(t, filepath.Join(base, "target"), 0o755)
			p := mkdirMode(t, filepath.Join(base, "shared"), 0o777)
			if err := os.Symlink(target, filepath.Join(p, "run")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(p, "run", "pw.sock"), target
		}},
		{name: "dir_owned_by_another_account", root: true, setup: func(t *testing.T, base string) (string, string) {
			d := mkdirMode(t, filepath.Join(base, "run"), 0o755)
			if err := os.Chown(d, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(d, "pw.sock"), d
		}},
		{name: "parent_owned_by_another_account", root: true, setup: func(t *testing.T, base string) (string, string) {
			p := mkdirMode(t, filepath.Join(base, "theirs"), 0o755)
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(p, "run", "pw.sock"), p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && uid != 0 {
				t.Skip("SKIPPED: giving a directory to another account needs root (CI runs as root)")
			}
			base := t.TempDir()
			if err := os.Chmod(base, 0o755); err != nil {
				t.Fatal(err)
			}
			sock, untouched := tc.setup(t, base)
			l, err := Listen(sock, 0o666)
			if err == nil {
				l.Close()
				t.Fatalf("Listen(%s) succeeded", sock)
			}
			var ue *UnsafeDirError
			if !errors.As(err, &ue) {
				t.Fatalf("want an UnsafeDirError, got %v", err)
			}
			t.Logf("refused: %v", err)
			if ents, err := os.ReadDir(untouched); err != nil || len(ents) != 0 {
				t.Errorf("%s: want it untouched and empty: %v %v", untouched, ents, err)
			}
		})
	}

	t.Run("missing_dir_serve_cannot_create_names_the_fix", func(t *testing.T) {
		if uid == 0 {
			t.Skip("root can create it anywhere")
		}
		p := mkdirMode(t, filepath.Join(t.TempDir(), "ro"), 0o555)
		err := PrepareSocketDir(filepath.Join(p, "run", "pw.sock"), uid)
		if err == nil || !errors.Is(err, syscall.EACCES) {
			t.Fatalf("want EACCES with the fix, got %v", err)
		}
	})
}
