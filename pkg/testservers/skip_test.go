package testservers

import (
	"strings"
	"testing"
)

// TestAbsentIsCountedAndReported: a test skipped for a missing server is
// counted, and the banner printed at the end names the package, the
// count, the reason and how to run the tests.
func TestAbsentIsCountedAndReported(t *testing.T) {
	t.Setenv(RequireEnv, "")
	before, _ := skipped()
	for range 2 {
		t.Run("needs a server", func(t *testing.T) { absent(t, "dynalite "+DynaliteVersion, "/nowhere/dynalite") })
	}
	n, reason := skipped()
	if n != before+2 || !strings.Contains(reason, "/nowhere/dynalite") {
		t.Fatalf("skipped() = %d, %q; want %d and the missing server", n, reason, before+2)
	}
	banner := skipBanner(testPackage(), n, reason)
	for _, want := range []string{"SKIPPED, NOT TESTED: 2 ", "./pkg/testservers/", "./scripts/test-deps.sh", RequireEnv + "=1 go test ./pkg/testservers/"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner %q does not say %q", banner, want)
		}
	}
}
