package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/bridge/githubbridge"
	"github.com/prod-write/prod-write/pkg/bridge/slackbridge"
	"github.com/prod-write/prod-write/pkg/decisionlog"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// hostile are the code points of docs/adr/0062-showing-agent-text.md, each
// in a key an approver would read as auth_required: every one renders as
// nothing, as blank space or reverses what follows, and the first nine
// pass unicode.IsPrint.
var hostile = []rune{
	0x3164, 0x115F, 0x1160, 0xFFA0, // Hangul fillers
	0x2800,          // Braille blank
	0x034F,          // combining grapheme joiner
	0xFE0F, 0xE0100, // variation selectors
	0x17B4,         // Khmer vowel inherent
	0x202E, 0x200D, // right-to-left override, zero-width joiner
	0x00A0, 0x3000, // spaces that are not U+0020
	0x1B, // a control
}

// surfaces render a view (and the log line of a refusal about its plan)
// as each surface shows it: the text a person reads.
var surfaces = []struct {
	name string
	// json: the surface's text is JSON, escapes are JSON's.
	json   bool
	render func(t *testing.T, v *bridge.View) string
}{
	{"slack", false, func(t *testing.T, v *bridge.View) string {
		return strings.Join(stringsOf(t, slackbridge.Blocks(v)), "\n")
	}},
	{"github", false, func(t *testing.T, v *bridge.View) string {
		return githubbridge.Title(v) + "\n" + githubbridge.Body(v)
	}},
	{"page", false, func(t *testing.T, v *bridge.View) string {
		b, err := approvalpage.Shown(&bridge.Judgement{Plan: v.Plan}, v)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		// What the script sets as text: the decoded strings, and argv's
		// words side by side as the row's text reads (assets/app.js).
		argv := stringsOf(t, doc["argv"])
		delete(doc, "argv")
		return "Argv " + strings.Join(argv, " ") + "\n" + strings.Join(stringsOf(t, doc), "\n")
	}},
	{"cli plan", false, func(t *testing.T, v *bridge.View) string {
		var b bytes.Buffer
		printPlan(&b, v.Plan)
		return b.String()
	}},
	{"cli status", false, func(t *testing.T, v *bridge.View) string {
		var b bytes.Buffer
		f := &Factory{}
		f.IO = &IOStreams{Out: &b}
		r := &refusal.Error{Code: refusal.NoApproval, Reason: "no approval of " + v.Plan.Target, Missing: []string{v.Plan.Target}}
		err := printStatus(f, &api.StatusResult{Plan: v.Plan, Fingerprint: v.Plan.Fingerprint, Refusal: r,
			Explanation: &approval.Explanation{Sentence: "refused"}})
		if e := (*ExitError)(nil); !errors.As(err, &e) {
			t.Fatalf("printStatus: %v", err)
		}
		return b.String()
	}},
	{"decision log", true, func(t *testing.T, v *bridge.View) string {
		p := v.Plan
		return string(decisionlog.Entry{Decision: decisionlog.Refused, Target: p.Target, Reason: "cwd " + p.Cwd + " argv " + strings.Join(p.Argv, " "),
			Missing: []string{v.Record.Summary}}.Line())
	}},
}

// TestAgentTextShownOnEverySurface runs the same hostile inputs through
// every surface an approver reads: each hidden code point must show as an
// escape, a newline in a path must not start a line, and two argv that
// differ only in where their elements end must read differently.
func TestAgentTextShownOnEverySurface(t *testing.T) {
	type input struct {
		name string
		in   string
		// hidden is the code point that must not appear as itself.
		hidden rune
	}
	var inputs []input
	for _, r := range hostile {
		inputs = append(inputs, input{fmt.Sprintf("%U", r), "auth" + string(r) + "_required", r})
	}
	inputs = append(inputs,
		input{"a combining mark alone", "\u0301", 0x0301},
		input{"a newline in a path", "/srv/app\nArgv:        /bin/true", '\n'})
	for _, in := range inputs {
		v := hostileView(t, in.in, []string{"/usr/bin/deploy", in.in})
		for _, s := range surfaces {
			t.Run(in.name+"/"+s.name, func(t *testing.T) {
				out := s.render(t, v)
				if in.hidden == '\n' {
					// A line of its own would read as the plan's argv.
					if strings.Contains(out, "\nArgv:        /bin/true") || !strings.Contains(out, `\nArgv:`) {
						t.Fatalf("the newline is not shown as \\n:\n%s", out)
					}
					return
				}
				if strings.ContainsRune(out, in.hidden) {
					t.Fatalf("%U shown as itself:\n%s", in.hidden, out)
				}
				if esc := escapeOf(in.hidden, s.json); !strings.Contains(out, esc) {
					t.Fatalf("%U not shown as %s:\n%s", in.hidden, esc, out)
				}
			})
		}
	}
	a := hostileView(t, "x", []string{"/usr/bin/git-release", "release", "v1 --force"})
	b := hostileView(t, "x", []string{"/usr/bin/git-release", "release v1", "--force"})
	for _, s := range surfaces {
		if s.json {
			continue // the log names the plan, not its argv
		}
		if sa, sb := s.render(t, a), s.render(t, b); sa == sb {
			t.Errorf("%s: two argv read the same:\n%s", s.name, sa)
		}
	}
}

// hostileView is a decision whose agent-controlled fields all hold in:
// the target, an argv element, the cwd, a file's path, the record's
// summary and a line of the file's diff.
func hostileView(t *testing.T, in string, argv []string) *bridge.View {
	t.Helper()
	// Prose and diffs keep their line breaks: a newline is tried in the
	// fields shown on one line.
	prose := in
	if strings.Contains(in, "\n") {
		prose = "x"
	}
	hunks, _, err := bridge.UnifiedDiff([]byte("auth_required = false\n"), []byte(prose+" = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := &operations.Plan{Version: operations.PlanVersion, Fingerprint: "sha256:" + strings.Repeat("ab", 32), Mutating: true, Planner: "agent", Created: now}
	p.Operation, p.Target, p.Argv, p.Cwd = "config-push", in, argv, in
	p.Files = []operations.File{{Name: "config", Path: in, Size: 1, SHA256: "sha256:" + strings.Repeat("cd", 32)}}
	return &bridge.View{Plan: p, RecordID: strings.Repeat("ef", 32), Gate: string(refusal.NoApproval), Approvers: 1, Now: now,
		Record: &approval.CertaintyRecord{Fingerprint: p.Fingerprint, Summary: prose, Effect: "e", BlastRadius: "b", Rollback: "r", Certainty: "high",
			Filer: "filer", Issued: now, Expires: now.Add(time.Hour)},
		Diffs: []bridge.FileDiff{{File: "config", Against: in, Hunks: hunks}}}
}

// escapeOf is how r is written where it would hide: Go-style in text,
// JSON's \u (UTF-16) in JSON.
func escapeOf(r rune, inJSON bool) string {
	if !inJSON {
		q := strconv.QuoteRuneToASCII(r)
		return q[1 : len(q)-1]
	}
	if r < 0x20 {
		return fmt.Sprintf(`\u%04x`, r)
	}
	if r > 0xffff {
		r1, r2 := utf16.EncodeRune(r)
		return fmt.Sprintf(`\u%04x\u%04x`, r1, r2)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// stringsOf is every string in v, as JSON has it: the text of Slack's
// blocks, the fields of the page's decision.
func stringsOf(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(x any) {
		switch x := x.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				walk(x[k])
			}
		}
	}
	walk(doc)
	return out
}
