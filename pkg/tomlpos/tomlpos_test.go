package tomlpos

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestCodeLinesBlanksStringsAndComments(t *testing.T) {
	src := "a = \"x = 1\" # y = 2\nb = '''\nc = 3\n'''\nd = 4\n"
	got := CodeLines([]byte(src))
	want := []string{`a = "     " `, `b = '''`, `     `, `'''`, `d = 4`, ``}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("CodeLines = %q, want %q", got, want)
	}
}

func TestKeyLine(t *testing.T) {
	src := "[[op]]\nname = \"the nme = x\"\n\n[[op]]\nname = \"b\"\nnme = 1\n"
	var v map[string]any
	md, err := toml.Decode(src, &v)
	if err != nil {
		t.Fatal(err)
	}
	if got := KeyLine([]byte(src), md.Keys(), toml.Key{"op", "nme"}); got != 6 {
		t.Fatalf("KeyLine = %d, want 6", got)
	}
}

// FuzzCodeLines: any input keeps its line count, and KeyLine never
// panics or points past the end.
func FuzzCodeLines(f *testing.F) {
	for _, s := range []string{"", "a = 1", "a = \"\\\"\"\n", "x = '''\n\n'''", "# c\n[t]\nk = \"v\" # c", "\"unterminated\n", "a = \"\"\"\nb\n\"\"\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		lines := CodeLines([]byte(src))
		if len(lines) != strings.Count(src, "\n")+1 {
			t.Fatalf("%d lines for %d newlines", len(lines), strings.Count(src, "\n"))
		}
		var v map[string]any
		md, err := toml.Decode(src, &v)
		if err != nil {
			return
		}
		for _, k := range md.Keys() {
			if n := KeyLine([]byte(src), md.Keys(), k); n < 0 || n > len(lines) {
				t.Fatalf("KeyLine(%v) = %d for %d lines", k, n, len(lines))
			}
		}
	})
}
