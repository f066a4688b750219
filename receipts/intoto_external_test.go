package receipts_test

// The exported attestations verified by code this project did not write:
// in-toto-golang's key loader, go-securesystemslib's DSSE verifier (which
// in-toto-golang verifies envelopes with) and the in-toto attestation
// framework's own Statement v1 validation.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ita1 "github.com/in-toto/attestation/go/v1"
	intoto "github.com/in-toto/in-toto-golang/in_toto"
	sslibdsse "github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/secure-systems-lab/go-securesystemslib/signerverifier"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// externalVerifier is the runner's public key as in-toto-golang loads it
// from PEM, as a DSSE verifier of go-securesystemslib.
func externalVerifier(t *testing.T, pub keys.Public) *sslibdsse.EnvelopeVerifier {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(ed25519.PublicKey(pub))
	if err != nil {
		t.Fatal(err)
	}
	var k intoto.Key
	if err := k.LoadKeyReaderDefaults(bytes.NewReader(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))); err != nil {
		t.Fatalf("in-toto-golang cannot load the runner key: %v", err)
	}
	// The envelope names the key by prod-write's key id (docs/FORMAT.md
	// §3), not in-toto-golang's; the key material is in-toto-golang's.
	v, err := signerverifier.NewED25519SignerVerifierFromSSLibKey(&signerverifier.SSLibKey{
		KeyType: k.KeyType, Scheme: k.Scheme, KeyID: pub.ID(), KeyVal: signerverifier.KeyVal{Public: k.KeyVal.Public},
	})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := sslibdsse.NewEnvelopeVerifier(v)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// verifyExternally verifies one exported line and returns its statement.
func verifyExternally(ev *sslibdsse.EnvelopeVerifier, line []byte) (*ita1.Statement, error) {
	var env sslibdsse.Envelope
	if err := json.Unmarshal(line, &env); err != nil {
		return nil, err
	}
	if env.PayloadType != "application/vnd.in-toto+json" {
		return nil, errors.New("payload type " + env.PayloadType)
	}
	_, body, err := ev.VerifyAndDecode(context.Background(), &env)
	if err != nil {
		return nil, err
	}
	var st ita1.Statement
	if err := protojson.Unmarshal(body, &st); err != nil {
		return nil, err
	}
	return &st, st.Validate()
}

func TestInTotoExportVerifiesWithInTotoTools(t *testing.T) {
	w := newWorld(t)
	out := filepath.Join(t.TempDir(), "runs.intoto.jsonl")
	w.pw("receipts", "export", "--in-toto", "--out", out)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	if len(lines) != 5 {
		t.Fatalf("%d attestations, want one per run (5)", len(lines))
	}
	ev := externalVerifier(t, w.runner.Public())
	sawFile, sawApprover := false, false
	for i, line := range lines {
		st, err := verifyExternally(ev, line)
		if err != nil {
			t.Fatalf("attestation %d does not verify: %v", i, err)
		}
		if st.GetPredicateType() != receipts.RunPredicateV1 {
			t.Errorf("predicateType %q", st.GetPredicateType())
		}
		if st.GetSubject()[0].GetName() != "/bin/true" && !strings.HasSuffix(st.GetSubject()[0].GetName(), "/install") {
			t.Errorf("first subject %q is not the program", st.GetSubject()[0].GetName())
		}
		for _, s := range st.GetSubject()[1:] {
			if s.GetName() == "file.config" && len(s.GetDigest()["sha256"]) == 64 {
				sawFile = true
			}
		}
		pred := st.GetPredicate().AsMap()
		dec := pred["decision"].(map[string]any)
		for _, a := range dec["approvers"].([]any) {
			if a.(map[string]any)["principal"] == "alice" && a.(map[string]any)["channel"] == "cli" {
				sawApprover = true
			}
		}
		if o, ok := pred["outcome"].(map[string]any); !ok || o["exit_code"] != float64(0) {
			t.Errorf("attestation %d outcome %v", i, pred["outcome"])
		}
	}
	if !sawFile || !sawApprover {
		t.Errorf("file subject seen %v, alice via the CLI seen %v", sawFile, sawApprover)
	}

	// A one-byte change anywhere in what is signed fails verification.
	var env approval.Envelope
	if err := json.Unmarshal(lines[0], &env); err != nil {
		t.Fatal(err)
	}
	body, _ := base64.StdEncoding.DecodeString(env.Payload)
	for _, at := range []int{0, len(body) / 2, len(body) - 1} {
		b := bytes.Clone(body)
		b[at] ^= 0x01
		e := env
		e.Payload = base64.StdEncoding.EncodeToString(b)
		raw, _ := json.Marshal(e)
		if _, err := verifyExternally(ev, raw); err == nil {
			t.Errorf("payload with byte %d changed still verifies", at)
		}
	}
	sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	sig[0] ^= 0x01
	e := env
	e.Signatures = []dsse.Signature{{KeyID: env.Signatures[0].KeyID, Sig: base64.StdEncoding.EncodeToString(sig)}}
	raw, _ := json.Marshal(e)
	if _, err := verifyExternally(ev, raw); err == nil {
		t.Error("a changed signature still verifies")
	}
	// And another key's signature does not pass for the runner's.
	if _, err := verifyExternally(externalVerifier(t, w.agent.Public()), lines[0]); err == nil {
		t.Error("the agent's key verifies the runner's attestation")
	}
}

// Export attests only what a runner signed: a journal line re-signed by
// another key stops it (the defence: export would otherwise sign, with the
// runner key, a receipt the runner never wrote).
func TestInTotoExportRefusesAnEntryNoRunnerSigned(t *testing.T) {
	w := newWorld(t)
	lines := append([]string(nil), w.journal...)
	_, r, err := receipts.Decode([]byte(lines[2]))
	if err != nil {
		t.Fatal(err)
	}
	env, err := approval.Sign(w.agent, receipts.PayloadType, r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	lines[2] = string(b)
	p, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := receipts.ExportInToto(context.Background(), strings.NewReader(strings.Join(lines, "\n")+"\n"), p, w.runner, &out)
	var ue *receipts.UnverifiedError
	if !errors.As(err, &ue) || ue.Line != 3 {
		t.Fatalf("export = %d, %v; want an UnverifiedError for line 3", n, err)
	}
	if n != 1 {
		t.Errorf("%d statements before the bad line, want 1", n)
	}
}
