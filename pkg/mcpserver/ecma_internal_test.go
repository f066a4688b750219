package mcpserver

import (
	"strings"
	"testing"

	"github.com/prod-write/prod-write/operations"
)

// RE2 text never reaches a schema: each construct ECMA-262 lacks or reads
// otherwise is written out in what means the same there, and what cannot be
// is left out. (TestSchemasCompileInAjv checks the meaning with ajv.)
func TestECMAPattern(t *testing.T) {
	tests := []struct {
		re2, want string // want "" when it cannot be translated
	}{
		{`[a-z]+`, `^[a-z]+$`},
		{`[a-z][a-z0-9-]{0,30}`, `^[a-z][\-0-9a-z]{0,30}$`},
		{`[[:alpha:]]+`, `^[A-Za-z]+$`},
		{`[[:^digit:]]`, `^[^0-9]$`},
		{`(?i)ok`, `^[Oo][Kk\u212A]$`},
		{`(?i)[a-c]`, `^[A-Ca-c]$`},
		{`\d+\z`, `^[0-9]+$`},
		{`\Aab`, `^ab$`},
		{`^[a-z][a-z0-9-]{0,30}$`, `^[a-z][\-0-9a-z]{0,30}$`},
		{`(?P<year>\d{4})-(\d\d)`, `^(?:[0-9]{4})-(?:[0-9][0-9])$`},
		{`.+`, `^[^\n]+$`},
		{`(?s).`, `^[\s\S]$`},
		{`(?m)a$\n^b`, `^a(?![^\n])\n(?<![^\n])b$`},
		{`\s`, `^[\t\n\f\r ]$`},
		{`\w\b`, `^[0-9A-Z_a-z]\b$`},
		{`[^/]+`, `^[^/]+$`},
		{`a|bc`, `^(?:a|bc)$`},
		{`(?U)a+`, `^a+?$`},
		{`x{2,}y{3}`, `^x{2,}y{3}$`},
		{`é`, `^\u00E9$`},
		{`😀+`, `^(?:😀)+$`},
		{`\Q{a}.\E`, `^\{a\}\.$`},
		{`[\]\-\\^]`, `^[\-\\-\^]$`},
		{`[^\x00-\x{FFFF}]`, `^[^\u0000-\uFFFF]$`},
		{`\pL`, ``},
		{`\p{Greek}`, ``},
		{`[😀-😎]`, ``},
		{`(?i)\x{10400}`, ``},
		{`[\x{D800}\x{DC00}-\x{DFFF}]`, ``},
		{`(?i)` + strings.Repeat("abcdefghij", 30), ``},
	}
	for _, tt := range tests {
		got, ok := ecmaPattern(tt.re2)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("ecmaPattern(%q) = %q, %v; want %q", tt.re2, got, ok, tt.want)
		}
	}
}

// A pattern that cannot be translated is left out of the schema and stated
// in the description; an integer param's pattern is always in the
// description, JSON Schema applying patterns to strings only.
func TestParamSchemaPattern(t *testing.T) {
	s := paramSchema(operations.Param{Type: "string", Description: "a name", Pattern: `\pL+`})
	if s.Pattern != "" {
		t.Errorf("pattern %q in the schema", s.Pattern)
	}
	if !strings.Contains(s.Description, `the server checks the value against the RE2 pattern ^(?:\pL+)$`) || !strings.HasPrefix(s.Description, "a name (") {
		t.Errorf("description %q", s.Description)
	}
	s = paramSchema(operations.Param{Type: "string", Pattern: `[[:alpha:]]+`})
	if s.Pattern != `^[A-Za-z]+$` || s.Description != "" {
		t.Errorf("translated: pattern %q, description %q", s.Pattern, s.Description)
	}
	s = paramSchema(operations.Param{Type: "integer", Pattern: `[1-9][0-9]*`})
	if s.Pattern != "" || !strings.Contains(s.Description, `RE2 pattern ^(?:[1-9][0-9]*)$`) {
		t.Errorf("integer: pattern %q, description %q", s.Pattern, s.Description)
	}
}
