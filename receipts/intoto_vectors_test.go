package receipts_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

var updateVectors = flag.Bool("update-intoto-vectors", false, "regenerate testdata/vectors/intoto from real runs (changes the vectors: see docs/FORMAT.md §4)")

const intotoVectors = "../testdata/vectors/intoto"

// vectorKey is the vectors' runner key. A checkout does not keep the
// key's mode 0600, which keys.Load insists on: it loads a private copy.
func vectorKey(t testing.TB) *keys.Private {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(intotoVectors, "runner.key"))
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(t.TempDir(), "runner.key")
	if err := os.WriteFile(keyPath, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := keys.Load(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestInTotoVectors checks docs/FORMAT.md §4's vectors: the runner key,
// trust policy and journal there export to exactly expected.jsonl.
func TestInTotoVectors(t *testing.T) {
	if *updateVectors {
		w := newWorld(t)
		for _, f := range [][2]string{{"keys/runner.key", "runner.key"}, {"trust.toml", "trust.toml"}, {"state/journal/receipts.jsonl", "journal.jsonl"}} {
			b, err := os.ReadFile(filepath.Join(w.dir, f[0]))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(intotoVectors, f[1]), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	k := vectorKey(t)
	p, err := approval.LoadPolicy(filepath.Join(intotoVectors, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	journal, err := os.ReadFile(filepath.Join(intotoVectors, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := receipts.ExportInToto(context.Background(), bytes.NewReader(journal), p, k, &got); err != nil {
		t.Fatal(err)
	}
	if *updateVectors {
		if err := os.WriteFile(filepath.Join(intotoVectors, "expected.jsonl"), got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(filepath.Join(intotoVectors, "expected.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("export of the vector journal differs from expected.jsonl:\n got %.400s\nwant %.400s", got.String(), want)
	}
	// The expected statements verify with the external tools too.
	ev := externalVerifier(t, k.Public())
	for i, line := range bytes.Split(bytes.TrimSuffix(want, []byte("\n")), []byte("\n")) {
		if _, err := verifyExternally(ev, line); err != nil {
			t.Errorf("expected.jsonl line %d: %v", i+1, err)
		}
	}
}
