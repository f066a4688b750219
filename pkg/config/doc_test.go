package config_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/tomlpos/tomlpostest"
)

// TestConfigDocumentsEveryKey: docs/CONFIG.md has a row for every key
// prod-write.toml, an operation file and trust.toml accept, in the file's
// section (the MCP tokens file is checked in pkg/mcpserver).
func TestConfigDocumentsEveryKey(t *testing.T) {
	for _, tc := range []struct {
		section string
		t       reflect.Type
	}{
		{"## prod-write.toml", reflect.TypeFor[config.Config]()},
		{"## operations/*.toml", reflect.TypeFor[operations.Operation]()},
		{"## trust.toml", reflect.TypeFor[approval.Principal]()},
		{"## trust.toml", reflect.TypeFor[approval.Freeze]()},
		{"## trust.toml", reflect.TypeFor[approval.FreezeCalendar]()},
		{"## trust.toml", reflect.TypeFor[approval.PasskeyPolicy]()},
		{"## trust.toml", reflect.TypeFor[approval.Witness]()},
	} {
		for _, key := range undocumented(t, "../../docs/CONFIG.md", tc.section, tc.t) {
			t.Errorf("docs/CONFIG.md, %s: no row for key %q", strings.TrimPrefix(tc.section, "## "), key)
		}
	}
}

// undocumented returns the keys of t with no table row "| `KEY` |" in
// section (from its heading to the next "## ") of the Markdown file doc.
func undocumented(t *testing.T, doc, section string, typ reflect.Type) []string {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "\n"+section+"\n")
	if i < 0 {
		t.Fatalf("%s has no section %q", doc, section)
	}
	text = text[i+len(section)+2:]
	if j := strings.Index(text, "\n## "); j >= 0 {
		text = text[:j]
	}
	var missing []string
	for _, key := range tomlpostest.Paths(typ) {
		if !strings.Contains(text, "\n| `"+key+"` |") {
			missing = append(missing, key)
		}
	}
	return missing
}
