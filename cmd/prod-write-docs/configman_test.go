package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// prod-write.toml(5) is generated from docs/CONFIG.md, so it is in sync by
// construction; this checks the generation loses nothing: every key row of
// every table of CONFIG.md is a tagged paragraph of the page, no Markdown
// is left in it, and groff (when installed) reads it without a warning.
func TestConfigManFromConfigMD(t *testing.T) {
	md, err := os.ReadFile(filepath.Join("..", "..", "docs", "CONFIG.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := configMan(md, "test")
	if !bytes.Contains(page, []byte(".TH PROD-WRITE.TOML 5 ")) {
		t.Fatalf("no section-5 title line:\n%.300s", page)
	}
	tags := map[string]bool{}
	lines := strings.Split(string(page), "\n")
	for i, l := range lines {
		if l == ".TP" && i+1 < len(lines) {
			tags[lines[i+1]] = true
		}
	}
	row := regexp.MustCompile("^\\| `([^`]+)` \\|")
	n := 0
	for _, l := range strings.Split(string(md), "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		n++
		if want := escapeLine(inline("`" + m[1] + "`")); !tags[want] {
			t.Errorf("CONFIG.md's key %q is not a tagged paragraph of the page (want %q)", m[1], want)
		}
	}
	if n < 50 {
		t.Fatalf("only %d key rows found in CONFIG.md: the test no longer reads its tables", n)
	}
	for _, md := range []string{"```", "](", "| --- |"} {
		if bytes.Contains(page, []byte(md)) {
			t.Errorf("Markdown %q left in the page", md)
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Log("groff not installed: the page's roff is not checked")
		return
	}
	cmd := exec.Command(groff, "-k", "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = bytes.NewReader(page)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("groff: %v\n%s", err, out)
	}
}
