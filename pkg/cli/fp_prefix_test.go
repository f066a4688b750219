package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/localapi"
)

// A prefix two stored plans share is ambiguous: a usage error, never a
// guess.
func TestFingerprintPrefixAmbiguous(t *testing.T) {
	h := newRunHarness(t)
	plans := filepath.Join(h.dir, "state", "store", "plans")
	if err := os.MkdirAll(plans, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tail := range []string{"1", "2"} {
		name := strings.Repeat("ab", 6) + strings.Repeat("0", 51) + tail + ".json"
		if err := os.WriteFile(filepath.Join(plans, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, _, stderr := h.run("status", strings.Repeat("ab", 6))
	if code != ExitUsage || !strings.Contains(stderr, "ambiguous: 2 stored plans") {
		t.Fatalf("status with an ambiguous prefix: %d %s", code, stderr)
	}
	var usage *localapi.UsageError
	f := &Factory{Env: localapi.Env{Getwd: func() (string, error) { return h.dir, nil }, LookupEnv: func(string) (string, bool) { return "", false }}}
	c, err := f.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ResolveFingerprint(c, "sha256:"+strings.Repeat("ab", 6)+strings.Repeat("0", 51)+"1"); err != nil {
		t.Fatalf("a unique 63-digit prefix: %v", err)
	}
	if _, err := f.ResolveFingerprint(c, "ABABABABABAB"); !errors.As(err, &usage) {
		t.Fatalf("upper-case hex: %v, want a usage error", err)
	}
}
