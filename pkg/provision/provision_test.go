package provision

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// owner is an account tests may chown to: the test's own, or nobody's
// when the test runs as root.
func owner() Account {
	if os.Geteuid() == 0 {
		return Account{Name: "nobody", UID: 65534, GID: 65534}
	}
	return Account{Name: "self", UID: os.Geteuid(), GID: os.Getegid()}
}

func layout() Layout {
	svc := owner()
	return Layout{
		Dirs: []Dir{
			{Path: "/etc/prod-write", Owner: Root, Mode: 0o755},
			{Path: "/var/lib/prod-write", Owner: svc, Mode: 0o700},
		},
		Files: []File{
			{Path: "/etc/prod-write/prod-write.toml", Data: []byte("state = \"/var/lib/prod-write\"\n"), Owner: Root, Mode: 0o644},
			{Path: "/var/lib/prod-write/runner.key", Data: []byte("key\n"), Owner: svc, Mode: 0o600},
		},
	}
}

// scratch returns a root whose directories are the test's (0755).
func scratch(t *testing.T) string {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// nothingWritten fails if any path of the layout exists below root.
func nothingWritten(t *testing.T, root string) {
	t.Helper()
	for _, p := range []string{"/etc/prod-write", "/var/lib/prod-write/runner.key"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s was written", p)
		}
	}
}

func TestWriteLayout(t *testing.T) {
	root := scratch(t)
	if err := (&Writer{Root: root}).Write(layout()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
		uid  int
	}{
		{"/etc/prod-write", os.ModeDir | 0o755, 0},
		{"/etc/prod-write/prod-write.toml", 0o644, 0},
		{"/var/lib/prod-write", os.ModeDir | 0o700, owner().UID},
		{"/var/lib/prod-write/runner.key", 0o600, owner().UID},
	} {
		fi, err := os.Lstat(filepath.Join(root, c.path))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.mode {
			t.Errorf("%s: mode %v, want %v", c.path, fi.Mode(), c.mode)
		}
		if uid := int(statUID(fi)); os.Geteuid() == 0 && uid != c.uid {
			t.Errorf("%s: owner %d, want %d", c.path, uid, c.uid)
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "/var/lib/prod-write/runner.key"))
	if err != nil || string(b) != "key\n" {
		t.Errorf("runner.key holds %q, %v", b, err)
	}
}

// An existing policy is never overwritten: setup says which files exist
// and writes nothing, not even the files that do not exist yet.
func TestWriteRefusesAnExistingFile(t *testing.T) {
	root := scratch(t)
	etc := filepath.Join(root, "etc", "prod-write")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	old := []byte("# the operator's own\n")
	if err := os.WriteFile(filepath.Join(etc, "prod-write.toml"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	err := (&Writer{Root: root}).Write(layout())
	var exists *ExistsError
	if !errors.As(err, &exists) || len(exists.Paths) != 1 || exists.Paths[0] != "/etc/prod-write/prod-write.toml" {
		t.Fatalf("got %v, want an ExistsError naming prod-write.toml", err)
	}
	if b, _ := os.ReadFile(filepath.Join(etc, "prod-write.toml")); string(b) != string(old) {
		t.Errorf("prod-write.toml changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(root, "var", "lib", "prod-write")); err == nil {
		t.Error("the state directory was made although setup refused")
	}
}

// A dangling symbolic link where a file goes counts as existing: O_EXCL
// would refuse it, and setup says so first.
func TestWriteRefusesADanglingLink(t *testing.T) {
	root := scratch(t)
	etc := filepath.Join(root, "etc", "prod-write")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(root, "shadow")
	if err := os.Symlink(target, filepath.Join(etc, "prod-write.toml")); err != nil {
		t.Fatal(err)
	}
	var exists *ExistsError
	if err := (&Writer{Root: root}).Write(layout()); !errors.As(err, &exists) {
		t.Fatalf("got %v, want an ExistsError", err)
	}
	if _, err := os.Lstat(target); err == nil {
		t.Error("setup wrote through the link")
	}
}

// A symbolic link planted in the state directory's parent is never
// followed: not as the state directory itself, nor as a parent in a
// directory another account may write.
func TestWriteRefusesAPlantedLink(t *testing.T) {
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, root, elsewhere string)
	}{
		{"the state directory", func(t *testing.T, root, elsewhere string) {
			mkdir(t, filepath.Join(root, "var", "lib"), 0o755)
			symlink(t, elsewhere, filepath.Join(root, "var", "lib", "prod-write"))
		}},
		{"its parent, in a directory others may write", func(t *testing.T, root, elsewhere string) {
			mkdir(t, filepath.Join(root, "var"), 0o777)
			symlink(t, elsewhere, filepath.Join(root, "var", "lib"))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := scratch(t)
			elsewhere := filepath.Join(root, "elsewhere")
			mkdir(t, elsewhere, 0o755)
			c.plant(t, root, elsewhere)
			err := (&Writer{Root: root}).Write(layout())
			var unsafe *UnsafeError
			if !errors.As(err, &unsafe) {
				t.Fatalf("got %v, want an UnsafeError", err)
			}
			t.Log(err)
			if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
				t.Errorf("setup wrote through the link: %v", ents)
			}
			nothingWritten(t, root)
		})
	}
}

// A directory others may write, on the way to the layout, is refused even
// without a link in it yet: one could be planted at any moment.
func TestWriteRefusesAWritableParent(t *testing.T) {
	root := scratch(t)
	mkdir(t, filepath.Join(root, "var"), 0o777)
	var unsafe *UnsafeError
	if err := (&Writer{Root: root}).Write(layout()); !errors.As(err, &unsafe) {
		t.Fatalf("got %v, want an UnsafeError", err)
	}
	nothingWritten(t, root)
}

// An empty file is never written (an empty secret is no secret).
func TestWriteRefusesAnEmptyFile(t *testing.T) {
	root := scratch(t)
	l := layout()
	l.Files[1].Data = nil
	var unsafe *UnsafeError
	if err := (&Writer{Root: root}).Write(l); !errors.As(err, &unsafe) {
		t.Fatalf("got %v, want an UnsafeError", err)
	}
}

func mkdir(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}
