package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/config"
)

// A record the gate cannot read refuses its plan (evidence_unreadable):
// doctor names it, so an operator finds it before an agent's run does.
func TestDoctorNamesUnreadableEvidence(t *testing.T) {
	dir := t.TempDir()
	c, err := config.Parse(filepath.Join(dir, "prod-write.toml"), []byte(`state = "state"`))
	if err != nil {
		t.Fatal(err)
	}
	fp := strings.Repeat("ab", 32)
	ev := filepath.Join(c.StoreDir(), "evidence", fp)
	if err := os.MkdirAll(ev, 0o700); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(ev, strings.Repeat("cd", 32)+".json")
	if err := os.WriteFile(bad, []byte(`{"payloadType":`), 0o600); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, f := range Check(c, Current()) {
		if f.Check == "evidence-unreadable" {
			found = f.Path == bad && f.Severity == Critical
		}
	}
	if !found {
		t.Fatalf("doctor did not name %s as unreadable evidence", bad)
	}
}
