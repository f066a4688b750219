package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/cli"
)

// section returns the body of the man page's section name.
func section(page, name string) string {
	_, body, ok := strings.Cut(page, "\n.SH "+name+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(body, "\n.SH "); i >= 0 {
		body = body[:i+1]
	}
	return body
}

// The generated prod-write(1) has EXIT STATUS, ENVIRONMENT and FILES
// before SEE ALSO, which links prod-write.toml(5); every exit status of
// cli.ExitStatuses (which a pkg/cli test holds to pkg/localapi's exit
// codes) is a tagged paragraph of EXIT STATUS; groff reads every page
// without a warning.
func TestManRootPage(t *testing.T) {
	dir := t.TempDir()
	if err := generate(dir, filepath.Join("..", "..")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "prod-write.1"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	last := -1
	for _, s := range []string{"DESCRIPTION", "EXIT STATUS", "ENVIRONMENT", "FILES", "SEE ALSO"} {
		i := strings.Index(page, "\n.SH "+s+"\n")
		if i < last {
			t.Errorf("section %s missing or out of order", s)
		}
		last = i
	}
	exit := section(page, "EXIT STATUS")
	for _, s := range cli.ExitStatuses {
		tag := fmt.Sprint(s.Code)
		if s.Plus != "" {
			tag += "+" + s.Plus
		}
		if !strings.Contains(exit, ".TP\n\\fB"+tag+"\\fR\n") {
			t.Errorf("exit status %s is not in EXIT STATUS:\n%s", tag, exit)
		}
	}
	// README's paragraph on exit codes names no status the page lacks.
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, para, _ := strings.Cut(string(readme), "Exit codes:")
	para, _, _ = strings.Cut(para, "With `--json`")
	codes := regexp.MustCompile(`\b\d+\b`).FindAllString(para, -1)
	if len(codes) < 10 {
		t.Fatalf("README's exit codes not found (%v)", codes)
	}
	for _, code := range codes {
		if !strings.Contains(exit, "\\fB"+code+"\\fR") && !strings.Contains(exit, "\\fB"+code+"+N\\fR") {
			t.Errorf("README's exit status %s is not in EXIT STATUS", code)
		}
	}
	files := section(page, "FILES")
	for _, f := range []string{"prod\\-write.toml", "/trust.toml", "/operations", "/state/store", "/state/journal/receipts.jsonl"} {
		if !strings.Contains(files, f) {
			t.Errorf("FILES does not name %s:\n%s", f, files)
		}
	}
	if see := section(page, "SEE ALSO"); !strings.Contains(see, `\fBprod-write.toml(5)\fP`) || !strings.Contains(see, `\fBprod-write-run(1)\fP`) {
		t.Errorf("SEE ALSO does not link prod-write.toml(5) beside the subcommands:\n%s", see)
	}
	if _, err := os.Stat(filepath.Join(dir, "prod-write.toml.5")); err != nil {
		t.Error(err)
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Log("groff not installed: the pages' roff is not checked")
		return
	}
	for _, p := range []string{"prod-write.1", "prod-write-run.1", "prod-write.toml.5"} {
		cmd := exec.Command(groff, "-k", "-man", "-Tutf8", "-ww", "-z", filepath.Join(dir, p))
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("groff %s: %v\n%s", p, err, out)
		}
	}
}

// Every environment variable the CLI reads (a LookupEnv or Getenv of a
// literal name, or a PROD_WRITE_ name, in pkg/cli, pkg/config, pkg/fastrun
// and pkg/bridge) is in prod-write(1)'s ENVIRONMENT.
func TestManEnvironmentIsEveryVariableRead(t *testing.T) {
	read := regexp.MustCompile(`(?:LookupEnv|Getenv)\("([A-Z_][A-Z0-9_]*)"\)|"(PROD_WRITE_[A-Z0-9_]+)"`)
	names := map[string]string{}
	for _, d := range []string{"cli", "config", "fastrun", "bridge"} {
		srcs, err := filepath.Glob(filepath.Join("..", "..", "pkg", d, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, src := range srcs {
			if strings.HasSuffix(src, "_test.go") {
				continue
			}
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range read.FindAllSubmatch(b, -1) {
				names[string(bytes.Join(m[1:], nil))] = src
			}
		}
	}
	if len(names) < 5 {
		t.Fatalf("only %d variables found: %v", len(names), names)
	}
	env, err := extraSections()
	if err != nil {
		t.Fatal(err)
	}
	env = section(env, "ENVIRONMENT")
	for n, src := range names {
		if !strings.Contains(env, ".TP\n\\fB"+n+"\\fR\n") {
			t.Errorf("%s reads $%s, which ENVIRONMENT does not list", src, n)
		}
	}
}
