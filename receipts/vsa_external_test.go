package receipts_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vsa "github.com/in-toto/attestation/go/predicates/vsa/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// replayVSA runs `replay FILE --vsa OUT --vsa-key KEY` and returns the
// exit code and what was written to OUT.
func replayVSA(t *testing.T, w *world, lines []string, ciKey string) (int, []byte) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "receipts.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "vsa.json")
	var o, e bytes.Buffer
	f := &cli.Factory{Env: localapi.Env{IO: &cli.IOStreams{In: strings.NewReader(""), Out: &o, Err: &e}, Now: time.Now,
		LookupEnv: func(string) (string, bool) { return "", false }, Getwd: func() (string, error) { return w.dir, nil }}}
	code := cli.Run([]string{"replay", path, "--vsa", out, "--vsa-key", ciKey}, f)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("replay exit %d wrote no VSA: %v\n%s", code, err, e.String())
	}
	return code, b
}

// A VSA from replay verifies with the in-toto tools under CI's key, says
// PASSED for an intact journal and FAILED for a tampered one, and names
// the head it verified and the policy it verified against.
func TestReplayVSAVerifiesWithInTotoTools(t *testing.T) {
	w := newWorld(t)
	ci, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	ciKey := filepath.Join(t.TempDir(), "ci.key")
	if err := ci.WriteNew(ciKey); err != nil {
		t.Fatal(err)
	}
	ev := externalVerifier(t, ci.Public())
	check := func(lines []string, wantCode int, wantResult string) {
		t.Helper()
		code, b := replayVSA(t, w, lines, ciKey)
		if (code == 0) != (wantCode == 0) {
			t.Errorf("replay exit %d", code)
		}
		st, err := verifyExternally(ev, bytes.TrimSuffix(b, []byte("\n")))
		if err != nil {
			t.Fatalf("VSA does not verify: %v", err)
		}
		if st.GetPredicateType() != "https://slsa.dev/verification_summary/v1" {
			t.Errorf("predicateType %q", st.GetPredicateType())
		}
		raw, _ := protojson.Marshal(st.GetPredicate())
		var p vsa.VerificationSummary
		if err := protojson.Unmarshal(raw, &p); err != nil {
			t.Fatalf("predicate is not a VSA v1: %v", err)
		}
		if p.GetVerificationResult() != wantResult {
			t.Errorf("verificationResult %q, want %q", p.GetVerificationResult(), wantResult)
		}
		if !strings.HasPrefix(p.GetPolicy().GetUri(), "file://") || len(p.GetPolicy().GetDigest()["sha256"]) != 64 {
			t.Errorf("policy %v", p.GetPolicy())
		}
		head := receipts.LineHash([]byte(lines[len(lines)-1]))
		if got := st.GetSubject()[0].GetDigest()["sha256"]; got != head {
			t.Errorf("subject digest %s, want the head %s", got, head)
		}
		// One byte changed, and it no longer verifies.
		b[len(b)/2] ^= 0x01
		if _, err := verifyExternally(ev, bytes.TrimSuffix(b, []byte("\n"))); err == nil {
			t.Error("a VSA with one byte changed still verifies")
		}
	}
	check(w.journal, 0, "PASSED")
	tampered := append([]string(nil), w.journal...)
	tampered[3] = strings.Replace(tampered[3], `"sig":"`, `"sig":"A`, 1)
	check(tampered, 1, "FAILED")
}
