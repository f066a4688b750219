package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// VSA is the SLSA Verification Summary Attestation's predicate type.
const VSA = "https://slsa.dev/verification_summary/v1"

// vsaVerifier names replay as the verifier of a VSA.
const vsaVerifier = "https://github.com/prod-write/prod-write/replay"

// vsaStatement is replay's verdict on a journal head as a SLSA VSA
// (docs/REPLAY.md): what was verified (the head line's sha256 and the
// number of entries), against which policy, and the result.
func vsaStatement(sum receipts.Summary, policy *approval.Policy, trustPath, resource, host string, verified string) *receipts.Statement {
	result := "PASSED"
	levels := []string{"PRODWRITE_REPLAY_V1"}
	if !sum.OK {
		result, levels = "FAILED", []string{"FAILED"}
	}
	type digest = map[string]string
	return &receipts.Statement{
		Type: receipts.StatementV1,
		Subject: []receipts.Subject{{
			Name:   "prod-write-journal:" + host,
			Digest: digest{"sha256": sum.Head},
		}},
		PredicateType: VSA,
		Predicate: struct {
			// Verifier is replay; the attestation framework's VSA v1
			// bindings know no verifier version, so none is given.
			Verifier struct {
				ID string `json:"id"`
			} `json:"verifier"`
			TimeVerified       string   `json:"timeVerified"`
			ResourceURI        string   `json:"resourceUri"`
			Policy             any      `json:"policy"`
			VerificationResult string   `json:"verificationResult"`
			VerifiedLevels     []string `json:"verifiedLevels"`
			SlsaVersion        string   `json:"slsaVersion"`
			// DependencyLevels is required by the VSA; a journal has no
			// dependencies.
			DependencyLevels map[string]uint64 `json:"dependencyLevels"`
		}{
			Verifier: struct {
				ID string `json:"id"`
			}{vsaVerifier},
			TimeVerified: verified,
			ResourceURI:  resource,
			Policy: map[string]any{"uri": "file://" + trustPath,
				"digest": digest{"sha256": strings.TrimPrefix(policy.Digest, "sha256:")}},
			VerificationResult: result,
			VerifiedLevels:     levels,
			SlsaVersion:        "1.0",
			DependencyLevels:   map[string]uint64{},
		},
	}
}

// writeVSA signs replay's verdict with the key given to CI and writes it
// to out as a DSSE envelope.
func writeVSA(f *Factory, o *ReplayOptions, sum receipts.Summary, policy *approval.Policy, trust, path, host string) error {
	k, err := keys.Load(o.VSAKey)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	trustAbs, _ := filepath.Abs(trust)
	resource := "file://" + abs + "#entries=" + itoa(sum.Entries)
	st := vsaStatement(sum, policy, trustAbs, resource, host, f.Now().UTC().Format("2006-01-02T15:04:05Z"))
	env, err := receipts.SignStatement(context.Background(), k, st)
	if err != nil {
		return err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return err
	}
	return os.WriteFile(o.VSA, append(b, '\n'), 0o644)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
