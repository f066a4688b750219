package cli

import (
	"strings"
	"testing"
)

// --version says which build this is, from the build info: never just
// "dev" (issue 18).
func TestVersionFromBuildInfo(t *testing.T) {
	v := buildVersion()
	if v == "" || v == "dev" || strings.HasPrefix(v, "unknown") {
		t.Fatalf("buildVersion() = %q, want the module version or (devel)", v)
	}
	if Version != v {
		t.Fatalf("Version = %q, want the build info's %q", Version, v)
	}
}
