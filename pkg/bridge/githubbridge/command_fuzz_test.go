package githubbridge

import (
	"strings"
	"testing"
)

// FuzzParseCommand: a comment counts only when its first line is exactly a
// command with a whole fingerprint, and the parser never panics.
func FuzzParseCommand(f *testing.F) {
	fp := "sha256:" + strings.Repeat("ab", 32)
	for _, s := range []string{"/approve " + fp, "/deny " + fp + "\nbecause", " /approve " + fp + " ", "/approve " + fp[:40], "/approve  " + fp, "/APPROVE " + fp, "lgtm\n/approve " + fp, ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		verdict, got, _, ok := ParseCommand(body)
		if !ok {
			return
		}
		first, _, _ := strings.Cut(body, "\n")
		if want := "/" + verdict + " " + got; strings.TrimSpace(first) != want {
			t.Fatalf("accepted first line %q as %q", first, want)
		}
		if verdict != "approve" && verdict != "deny" {
			t.Fatalf("verdict %q", verdict)
		}
		if len(got) != len(fp) {
			t.Fatalf("fingerprint %q", got)
		}
	})
}
