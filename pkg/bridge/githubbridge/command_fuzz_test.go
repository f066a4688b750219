package githubbridge

import (
	"strings"
	"testing"
)

// FuzzParseCommand: a comment counts only when its first line, less a
// CRLF's carriage return and the spaces and tabs around it, is exactly a
// command with a whole fingerprint (a deny followed by its reason); spaces
// and tabs around it never change what it says; any other character
// around it (another kind of white space included) makes it no command;
// and the parser never panics.
func FuzzParseCommand(f *testing.F) {
	fp := "sha256:" + strings.Repeat("ab", 32)
	for _, s := range []string{"/approve " + fp, "/deny " + fp + "\nbecause", " /approve " + fp + " ", "/approve " + fp[:40], "/approve  " + fp,
		"/APPROVE " + fp, "lgtm\n/approve " + fp, "", "\t/deny " + fp + "\tnot now\r\n", "/approve " + fp + "\r\n", "\u00a0/approve " + fp,
		"/deny " + fp + " x", "/approve " + fp + " x", "/deny " + fp + "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		verdict, got, reason, ok := ParseCommand(body)
		first, rest, _ := strings.Cut(body, "\n")
		line := strings.Trim(strings.TrimSuffix(first, "\r"), " \t")
		if ok {
			if verdict != "approve" && verdict != "deny" {
				t.Fatalf("verdict %q", verdict)
			}
			if len(got) != len(fp) || !strings.HasPrefix(got, "sha256:") || strings.Trim(got[7:], "0123456789abcdef") != "" {
				t.Fatalf("fingerprint %q", got)
			}
			cmd := "/" + verdict + " " + got
			switch {
			case line == cmd:
			case verdict == "deny" && strings.HasPrefix(line, cmd) && (line[len(cmd)] == ' ' || line[len(cmd)] == '\t'):
				if same := strings.TrimSpace(strings.ToValidUTF8(line[len(cmd):], "\uFFFD")); len(same) < 400 && !strings.HasPrefix(reason, same) {
					t.Fatalf("the deny's reason %q lost its line's %q", reason, line[len(cmd):])
				}
			default:
				t.Fatalf("accepted first line %q as %q", first, cmd)
			}
		}
		// Spaces and tabs before and after the command never change it.
		for _, pad := range []string{" ", "\t", " \t  "} {
			v2, fp2, _, ok2 := ParseCommand(pad + first + pad + "\n" + rest)
			if strings.HasSuffix(first, "\r") {
				v2, fp2, _, ok2 = ParseCommand(pad + first[:len(first)-1] + pad + "\r\n" + rest)
			}
			if ok2 != ok || v2 != verdict || fp2 != got {
				t.Fatalf("padding %q changed %q from %v %q to %v %q", pad, first, ok, verdict, ok2, v2)
			}
		}
		// No other character before the command, white space or not,
		// leaves it a command.
		for _, pre := range []string{"\u00a0", "\u2003", "\u200b", "\ufeff", "\v", "\f", "\r", ">", "x"} {
			if _, _, _, ok2 := ParseCommand(pre + strings.TrimLeft(body, " \t")); ok2 {
				t.Fatalf("%q before %q is still a command", pre, first)
			}
		}
	})
}
