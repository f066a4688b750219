package visible_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/visible"
)

// TestHidden runs the code points of docs/adr/0062-showing-agent-text.md:
// each renders as nothing or as blank space, though unicode.IsPrint
// accepts the ones marked so.
func TestHidden(t *testing.T) {
	for _, r := range []rune{
		0x3164, 0x115F, 0x1160, 0xFFA0, // Hangul fillers (IsPrint accepts them)
		0x2800,         // Braille blank (IsPrint accepts it)
		0x034F, 0x17B4, // CGJ, Khmer vowel inherent (IsPrint accepts them)
		0xFE0F, 0xE0100, // variation selectors (IsPrint accepts them)
		0x202E, 0x2066, 0x200D, 0x200B, 0xFEFF, 0x00AD, 0xE0041, // Cf
		0x00A0, 0x2007, 0x3000, 0x2028, 0x0085, // spaces and breaks
		0x1B, 0x7F, '\t', '\n', // controls
	} {
		if !visible.Hidden(r) {
			t.Errorf("Hidden(%U) = false", r)
		}
	}
	for _, r := range "aZ09 -_\"'\\é日ж✓" {
		if visible.Hidden(r) {
			t.Errorf("Hidden(%U) = true", r)
		}
	}
}

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"rm -rf /srv/app\u202e/cod.txt\x1b[2Jok\nnext line": `rm -rf /srv/app\u202e/cod.txt\x1b[2Jok` + "\nnext line",
		"auth\u3164_required = true":                        `auth\u3164_required = true`,
		"caf\u0065\u0301 \u0301x":                           "caf\u0065\u0301 \\u0301x",
		"\u0301":                                            `\u0301`,
		"a\xffb":                                            `a\xffb`,
		"x\U000E0100":                                       `x\U000e0100`,
	} {
		if got := visible.Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLine(t *testing.T) {
	if got := visible.Line("no approval of /srv/app\ngate:        open\u3164"); got != `no approval of /srv/app\ngate:        open\u3164` {
		t.Errorf("Line: %s", got)
	}
}

func TestWordAndArgv(t *testing.T) {
	if got := visible.Argv([]string{"/bin/echo", "a b", "x;rm -rf /", "plain-word", "", `q"\`}); got != `/bin/echo "a b" "x;rm -rf /" plain-word "" "q\"\\"` {
		t.Errorf("Argv: %s", got)
	}
	a := visible.Argv([]string{"/bin/deploy", "release", "v1 --force"})
	b := visible.Argv([]string{"/bin/deploy", "release v1", "--force"})
	if a == b {
		t.Errorf("two argv read the same: %s", a)
	}
	if got := visible.Word("/srv/a\nb"); got != `"/srv/a\nb"` {
		t.Errorf("Word: %s", got)
	}
	if got := visible.Word("\u0301"); got != `"\u0301"` {
		t.Errorf("Word of a lone mark: %s", got)
	}
}

func TestJSONKeepsTheValue(t *testing.T) {
	in := map[string]string{"k": "auth\u3164_required\u202e\U000E0100 é\u0301 \u0301 \u2800日"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := visible.JSON(b)
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["k"] != in["k"] {
		t.Fatalf("JSON changed the value: %s (%v)", out, err)
	}
	for _, want := range []string{`\u3164`, `\u202e`, `\udb40\udd00`, `\u2800`, "é\u0301", ` \u0301`, "日"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("JSON: %s lacks %s", out, want)
		}
	}
}
