package mcpserver

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/operations"
)

// TestResultShowsHiddenCodePoints: a tool's result is JSON a model relays
// to people, so what would not show as itself is a \u escape in its text
// (docs/adr/0062-showing-agent-text.md), and the value it decodes to is
// the plan as bound, argv elements apart.
func TestResultShowsHiddenCodePoints(t *testing.T) {
	p := &operations.Plan{}
	p.Target, p.Cwd = "auth\u3164_required", "/srv/app\u202e\nx"
	p.Argv = []string{"/usr/bin/deploy", "v1\u2800--force", "\u0301", "x\U000E0100"}
	res := result(p, false)
	text := res.Content[0].(*mcp.TextContent).Text
	for _, r := range "\u3164\u202e\u2800\u0301\U000E0100" {
		if strings.ContainsRune(text, r) {
			t.Errorf("%U shown as itself: %s", r, text)
		}
	}
	for _, esc := range []string{`\u3164`, `\u202e`, `\u2800`, `\u0301`, `\udb40\udd00`, `\n`} {
		if !strings.Contains(text, esc) {
			t.Errorf("no %s in %s", esc, text)
		}
	}
	var back operations.Plan
	if err := json.Unmarshal([]byte(text), &back); err != nil || !reflect.DeepEqual(back.Argv, p.Argv) || back.Target != p.Target || back.Cwd != p.Cwd {
		t.Fatalf("the result decodes to %+v (%v), not the plan", back, err)
	}
	if string(res.StructuredContent.(json.RawMessage)) != text {
		t.Error("structured content and text differ")
	}
}
