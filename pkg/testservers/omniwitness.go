package testservers

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

// OmniwitnessVersion is the transparency-dev witness module's pinned
// pseudo-version (it has no release); scripts/test-deps.sh installs its
// cmd/omniwitness into .cache/bin.
const OmniwitnessVersion = "v0.0.0-20260720115447-2e1c6971d19e"

// Omniwitness starts a transparency-dev omniwitness (C2SP tlog-witness),
// a witness not written here, that witnesses the log of origin whose
// checkpoints logVKey (a signed-note Ed25519 verifier key) signs, with
// in-memory persistence, a new key named name, and nothing else: no
// feeder, no distributor, no public witness network. It returns its URL
// and its cosignature/v1 verifier key (the form trust.toml takes); it is
// stopped when t ends.
func Omniwitness(t testing.TB, name, origin, logVKey string) (url, vkey string) {
	t.Helper()
	bin, err := binary("PROD_WRITE_OMNIWITNESS", filepath.Join(".cache", "bin", "omniwitness"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		absent(t, "omniwitness "+OmniwitnessVersion, bin)
	}
	skey, plain, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	if vkey, err = fnote.VKeyToCosignatureV1(plain); err != nil {
		t.Fatal(err)
	}
	s, err := start("omniwitness", func(dir string, port int) ([]string, error) {
		keyFile, logs := filepath.Join(dir, "witness.key"), filepath.Join(dir, "logs.yaml")
		if err := os.WriteFile(keyFile, []byte(skey), 0o600); err != nil {
			return nil, err
		}
		y := fmt.Sprintf("Logs:\n  - Origin: %q\n    URL: https://log.invalid/\n    PublicKey: %q\n", origin, logVKey)
		if err := os.WriteFile(logs, []byte(y), 0o600); err != nil {
			return nil, err
		}
		return []string{bin, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--metrics_listen", "",
			"--private_key_path", keyFile, "--additional_logs", logs}, nil
	}, nil, func(endpoint string) bool { return httpStatus(endpoint+"/add-checkpoint") != 0 })
	if err != nil {
		t.Fatalf("starting omniwitness: %v", err)
	}
	t.Cleanup(s.stop)
	return s.endpoint, vkey
}
