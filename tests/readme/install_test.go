package readme

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The README's install command, `make install`, run into a DESTDIR as a
// packager would: the three binaries (not setuid, and each says which it
// is), their man pages, the shell completions and the service's unit
// files, which name the installed binary. Then, the binaries
// and pages built once, an install under a PREFIX alone and one into a
// DESTDIR alone: each writes below it and nowhere else, /etc/systemd/system
// included (docs/DEPLOYMENT.md, "With systemd").
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here")
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "make install") {
		t.Fatal("the README does not say how to install")
	}
	units := snapshot(t, "/etc/systemd/system")
	dest := t.TempDir()
	cmd := exec.Command("make", "install", "DESTDIR="+dest, "PREFIX=/opt/pw")
	cmd.Dir, cmd.Env = "../..", makeEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	checkInstalled(t, dest, "/opt/pw")
	// The installed prod-write(1) is the generated page, with the sections
	// cmd/prod-write-docs adds to cobra's.
	man, _ := os.ReadFile(filepath.Join(dest, "opt/pw/share/man/man1/prod-write.1"))
	for _, want := range []string{".SH EXIT STATUS", ".SH ENVIRONMENT", ".SH FILES", `\fBprod-write.toml(5)\fP`} {
		if !strings.Contains(string(man), want) {
			t.Errorf("the installed prod-write(1) lacks %q", want)
		}
	}
	var version string
	for _, bin := range []string{"prod-write", "prod-write-net"} {
		out, err := exec.Command(filepath.Join(dest, "opt/pw/bin", bin), "--version").Output()
		if err != nil || !strings.HasPrefix(string(out), bin+" version ") {
			t.Errorf("%s --version: %q %v", bin, out, err)
		}
		version = strings.TrimSpace(strings.TrimPrefix(string(out), bin+" version "))
	}
	// The pages name the build the binaries are (they once said
	// "(devel)", since `go run` stamps no VCS information), and in a clone
	// (not a worktree, whose .git is a file) that is its revision.
	if want := `"prod-write ` + version + `"`; !strings.Contains(string(man), want) {
		t.Errorf("prod-write(1)'s header does not name the installed build %s:\n%.200s", want, man)
	}
	if fi, err := os.Stat("../../.git"); err == nil && fi.IsDir() && version == "(devel)" {
		t.Errorf("installed from a clone, the binaries say version %q, not the revision", version)
	}

	t.Run("PREFIX", func(t *testing.T) {
		prefix := t.TempDir()
		makeInstall(t, prefix, "PREFIX="+prefix)
		checkInstalled(t, "", prefix)
	})
	t.Run("DESTDIR", func(t *testing.T) {
		dest := t.TempDir()
		makeInstall(t, dest, "DESTDIR="+dest)
		checkInstalled(t, dest, "/usr/local")
		// The default PREFIX's unit directory is one systemd searches.
		if _, err := exec.LookPath("systemd-analyze"); err == nil {
			out, err := exec.Command("systemd-analyze", "--system", "unit-paths").Output()
			if err != nil {
				t.Fatalf("systemd-analyze unit-paths: %v", err)
			}
			if !strings.Contains("\n"+string(out), "\n/usr/local/lib/systemd/system\n") {
				t.Errorf("systemd does not search /usr/local/lib/systemd/system, where make install puts the units:\n%s", out)
			}
		}
	})
	if after := snapshot(t, "/etc/systemd/system"); after != units {
		t.Errorf("make install changed /etc/systemd/system:\nbefore:\n%s\nafter:\n%s", units, after)
	}
}

// sandbox runs a command in a mount namespace where every file system
// but /proc, /sys and /dev is read-only except the directory $1 (bound
// onto itself first, so that it stays writable): any write outside that
// directory fails, whatever path it takes.
const sandbox = `set -eu
w=$1; shift
mount --bind "$w" "$w"
for m in $(awk '{print $5}' /proc/self/mountinfo); do
  case $m in "$w"|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue;; esac
  mount -o remount,bind,ro "$m"
done
exec "$@"
`

// makeInstall runs `make install` with args, reusing the binaries and man
// pages the first install built (-o build -o man). As root it runs in the
// sandbox, with only writable left writable, so that an install that
// writes anywhere else fails; as another user, where it cannot write
// /etc or /usr anyway, it runs as it is.
func makeInstall(t *testing.T, writable string, args ...string) {
	t.Helper()
	argv := append([]string{"make", "-o", "build", "-o", "man", "install"}, args...)
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Fatalf("as root, the install runs in a mount namespace of its own: %v", err)
		}
		argv = append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c", sandbox, "sh", writable}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = "../..", makeEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// makeEnv is the test's environment without the variables that would
// change where make installs (a PREFIX, DESTDIR or UNITDIR of the
// caller's, or a parent make's command line in MAKEFLAGS).
func makeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "PREFIX", "DESTDIR", "UNITDIR", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES":
		default:
			env = append(env, kv)
		}
	}
	return env
}

// checkInstalled checks what `make install DESTDIR=destdir PREFIX=prefix`
// wrote: everything below destdir (or prefix, without one) is below
// destdir+prefix (a directory on the way to it aside), the files of make
// install are there, with their modes, and the unit starts the binary
// where it runs from: PREFIX's, without DESTDIR, which is only where a
// package is staged.
func checkInstalled(t *testing.T, destdir, prefix string) {
	t.Helper()
	under, top := filepath.Join(destdir, prefix), destdir
	if top == "" {
		top = prefix
	}
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == under || strings.HasPrefix(p, under+"/") || (d.IsDir() && strings.HasPrefix(under, p+"/")) || p == top {
			return nil
		}
		t.Errorf("written outside PREFIX %s: %s", prefix, strings.TrimPrefix(p, top))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{"bin/prod-write", 0o755},
		{"bin/prod-write-cli", 0o755},
		{"bin/prod-write-net", 0o755},
		{"share/man/man1/prod-write.1", 0o644},
		{"share/man/man1/prod-write-serve.1", 0o644},
		{"share/man/man5/prod-write.toml.5", 0o644},
		{"share/bash-completion/completions/prod-write", 0o644},
		{"share/zsh/site-functions/_prod-write", 0o644},
		{"share/fish/vendor_completions.d/prod-write.fish", 0o644},
		{"lib/systemd/system/prod-write.service", 0o644},
		{"lib/systemd/system/prod-write.socket", 0o644},
	} {
		fi, err := os.Stat(filepath.Join(under, f.path))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if fi.Mode() != f.mode || fi.Size() == 0 {
			t.Errorf("%s: mode %v, %d bytes; want %v and not empty", f.path, fi.Mode(), fi.Size(), f.mode)
		}
	}
	unit, _ := os.ReadFile(filepath.Join(under, "lib/systemd/system/prod-write.service"))
	if want := "\nExecStart=" + filepath.Join(prefix, "bin/prod-write-net") + " serve "; !strings.Contains(string(unit), want) {
		t.Errorf("the unit does not start the installed binary (%s):\n%s", want, unit)
	}
}

// snapshot describes a directory tree: each entry's path, mode, size and
// modification time ("" if the directory does not exist).
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return fs.SkipAll
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %v %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
