package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's install command, `make install`, run into a DESTDIR as a
// packager would: the two binaries (not setuid, and each says which it
// is), their man pages, the shell completions and the service's unit
// files, which name the installed binary (issue 29).
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
	dest := t.TempDir()
	cmd := exec.Command("make", "install", "DESTDIR="+dest, "PREFIX=/opt/pw")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{"opt/pw/bin/prod-write", 0o755},
		{"opt/pw/bin/prod-write-cli", 0o755},
		{"opt/pw/bin/prod-write-net", 0o755},
		{"opt/pw/share/man/man1/prod-write.1", 0o644},
		{"opt/pw/share/man/man1/prod-write-serve.1", 0o644},
		{"opt/pw/share/man/man5/prod-write.toml.5", 0o644},
		{"opt/pw/share/bash-completion/completions/prod-write", 0o644},
		{"opt/pw/share/zsh/site-functions/_prod-write", 0o644},
		{"opt/pw/share/fish/vendor_completions.d/prod-write.fish", 0o644},
		{"etc/systemd/system/prod-write.service", 0o644},
		{"etc/systemd/system/prod-write.socket", 0o644},
	} {
		fi, err := os.Stat(filepath.Join(dest, f.path))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if fi.Mode() != f.mode || fi.Size() == 0 {
			t.Errorf("%s: mode %v, %d bytes; want %v and not empty", f.path, fi.Mode(), fi.Size(), f.mode)
		}
	}
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
	// The pages name the build the binaries are (issue 29: they said
	// "(devel)", since `go run` stamps no VCS information), and in a clone
	// (not a worktree, whose .git is a file) that is its revision.
	if want := `"prod-write ` + version + `"`; !strings.Contains(string(man), want) {
		t.Errorf("prod-write(1)'s header does not name the installed build %s:\n%.200s", want, man)
	}
	if fi, err := os.Stat("../../.git"); err == nil && fi.IsDir() && version == "(devel)" {
		t.Errorf("installed from a clone, the binaries say version %q, not the revision", version)
	}
	unit, _ := os.ReadFile(filepath.Join(dest, "etc/systemd/system/prod-write.service"))
	if !strings.Contains(string(unit), "ExecStart=/opt/pw/bin/prod-write-net serve") {
		t.Errorf("the unit does not start the installed binary:\n%s", unit)
	}
}
