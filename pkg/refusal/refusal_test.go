package refusal_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/prod-write/prod-write/pkg/refusal"
)

// TestAsThroughWrapping: callers find a refusal and its code however deep
// it is wrapped, and only a refusal.
func TestAsThroughWrapping(t *testing.T) {
	r := refusal.New(refusal.Vetoed, "bob answered %s", "deny").For("op", "sha256:x").Needs("nothing")
	err := fmt.Errorf("run: %w", fmt.Errorf("gate: %w", r))
	got, ok := refusal.As(err)
	if !ok || got != r {
		t.Fatalf("As = %v, %v", got, ok)
	}
	if !refusal.Is(err, refusal.Vetoed) || refusal.Is(err, refusal.NoApproval) {
		t.Fatal("Is does not match the code exactly")
	}
	if _, ok := refusal.As(errors.New("refused (vetoed): x")); ok {
		t.Fatal("a plain error that looks like a refusal is one")
	}
	if refusal.Is(nil, refusal.Vetoed) {
		t.Fatal("nil is a refusal")
	}
}

// TestForKeepsFirst: a refusal keeps the operation and fingerprint it was
// made with; For only fills in what is missing.
func TestForKeepsFirst(t *testing.T) {
	r := refusal.New(refusal.NoApproval, "x").For("", "sha256:a").For("op", "sha256:b")
	if r.Operation != "op" || r.Fingerprint != "sha256:a" {
		t.Fatalf("For gave %q %q", r.Operation, r.Fingerprint)
	}
}

// TestJSONShape: the machine form of a refusal (docs/DESIGN.md §8) always has a code,
// a reason and a missing list, an empty list rather than null.
func TestJSONShape(t *testing.T) {
	b, err := json.Marshal(refusal.New(refusal.SignatureInvalid, "bad %d", 1))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["code"] != "signature_invalid" || m["reason"] != "bad 1" {
		t.Fatalf("JSON %s", b)
	}
	if missing, ok := m["missing"].([]any); !ok || len(missing) != 0 {
		t.Fatalf("missing is %v in %s, want []", m["missing"], b)
	}
	if r := refusal.New(refusal.NoApproval, "x").Needs("a", "b"); len(r.Missing) != 2 {
		t.Fatalf("Needs: %v", r.Missing)
	}
}

// TestCodesAreStable: the codes are part of the CLI contract (docs/DESIGN.md §3); a
// rename breaks every script and dashboard that reads them.
func TestCodesAreStable(t *testing.T) {
	for code, want := range map[refusal.Code]string{
		refusal.OperationAbsent: "operation_absent", refusal.TargetNotAllowed: "target_not_allowed",
		refusal.ParamInvalid: "param_invalid", refusal.FingerprintMismatch: "fingerprint_mismatch",
		refusal.NoApproval: "no_approval", refusal.Vetoed: "vetoed", refusal.SelfApproval: "self_approval",
		refusal.EvidenceExpired: "evidence_expired", refusal.EvidenceConsumed: "evidence_consumed",
		refusal.SignatureInvalid: "signature_invalid", refusal.PrincipalUnknown: "principal_unknown",
		refusal.RoleMissing: "role_missing", refusal.InsecurePermissions: "insecure_permissions",
		refusal.OperationUnavailable: "operation_unavailable",
	} {
		if string(code) != want {
			t.Errorf("code %q, want %q", code, want)
		}
	}
}
