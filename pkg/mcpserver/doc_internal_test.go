package mcpserver

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/tomlpos"
	"github.com/prod-write/prod-write/pkg/tomlpos/tomlpostest"
)

// TestTokensFileDocumented: docs/CONFIG.md has a row for every key of a
// [[token]] table, in its "MCP tokens file" section (the other files are
// checked in pkg/config).
func TestTokensFileDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## MCP tokens file\n")
	if !ok {
		t.Fatal("docs/CONFIG.md has no section \"## MCP tokens file\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	if !strings.Contains(section, "[[token]]") {
		t.Error("docs/CONFIG.md does not name the [[token]] table")
	}
	for _, key := range tomlpostest.Paths(reflect.TypeFor[tokenEntry]()) {
		if !strings.Contains(section, "\n| `"+key+"` |") {
			t.Errorf("docs/CONFIG.md, MCP tokens file: no row for key %q", key)
		}
	}
	for _, key := range tomlpostest.Paths(reflect.TypeFor[oauthTable]()) {
		if key == "principal" {
			continue // the table, whose keys follow
		}
		if !strings.Contains(section, "\n| `oauth."+key+"` |") {
			t.Errorf("docs/CONFIG.md, MCP tokens file: no row for key %q", "oauth."+key)
		}
	}
	if f := tomlpos.Fields(reflect.TypeFor[tokensFile]()); len(f) != 3 || f[0].Name != "origins" || f[1].Name != "token" || f[2].Name != "oauth" {
		t.Errorf("a tokens file has keys %v; docs/CONFIG.md documents origins, [[token]] and [oauth] only", f)
	}
	if !strings.Contains(section, "\n| `origins` |") {
		t.Error("docs/CONFIG.md, MCP tokens file: no row for key \"origins\"")
	}
}
