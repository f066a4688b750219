package plans

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prod-write/prod-write/operations"
)

// A plan asks for the caller's directory only when it binds it: a caller
// whose directory stands for no path of the service's (a mount namespace
// of its own) still plans an operation that declares its cwd, given
// absolute paths; and one that declares none, or a relative file, needs it.
func TestBindsCallerCwdOnlyWhenThePlanDoes(t *testing.T) {
	dir := t.TempDir()
	toml := `
[[operation]]
name = "declared"
description = "d"
program = "true"
cwd = "/"
targets = ["t"]
[operation.files.config]
max_size = "1KiB"

[[operation]]
name = "callers"
description = "c"
program = "true"
targets = ["t"]
`
	if err := os.WriteFile(filepath.Join(dir, "ops.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := operations.Load(dir, []string{"/usr/bin", "/bin"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		op     string
		files  map[string]string
		inline bool
		want   bool
	}{
		{"declared", nil, false, false},
		{"declared", map[string]string{"config": "/etc/hostname"}, false, false},
		{"declared", map[string]string{"config": "app.toml"}, false, true},
		{"declared", map[string]string{"config": "../etc/hostname"}, false, true},
		{"callers", nil, false, true},
		{"unknown", nil, false, false},
		// Supplied inline over MCP HTTP: no path, so no directory.
		{"declared", map[string]string{"config": operations.InlinePath("config")}, true, false},
		{"declared", map[string]string{"config": operations.InlinePath("config")}, false, true},
		{"callers", map[string]string{"config": operations.InlinePath("config")}, true, true},
	} {
		if got := bindsCallerCwd(reg, tc.op, tc.files, tc.inline); got != tc.want {
			t.Errorf("bindsCallerCwd(%s, %v) = %v, want %v", tc.op, tc.files, got, tc.want)
		}
	}
}
