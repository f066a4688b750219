package operations_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/operations"
)

// record+approvals is what people write; smith+trinity, its older spelling,
// is what definitions store (ADR 0014). Either spelling gives the same
// definition and so the same digest, and the default is the stored one, so
// no operation's digest (and no fingerprint) moved with the rename.
func TestApprovalPathSpellings(t *testing.T) {
	op := func(paths string) *operations.Operation {
		t.Helper()
		src := "[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = [\"t\"]\n"
		if paths != "" {
			src += "[operation.approval]\npaths = " + paths + "\n"
		}
		ops, err := operations.Parse("p.toml", []byte(src))
		if err != nil {
			t.Fatalf("paths %s: %v", paths, err)
		}
		return ops[0]
	}
	tests := []struct {
		paths, same string
		stored      []string
	}{
		{`["record+approvals"]`, `["smith+trinity"]`, []string{operations.PathSmithTrinity}},
		{`["gera", "record+approvals"]`, ``, []string{operations.PathGera, operations.PathSmithTrinity}},
		{`["gera", "record+approvals"]`, `["gera", "smith+trinity"]`, []string{operations.PathGera, operations.PathSmithTrinity}},
	}
	for _, tt := range tests {
		a, b := op(tt.paths), op(tt.same)
		if !slices.Equal(a.Approval.Paths, tt.stored) {
			t.Errorf("paths %s stored as %q, want %q", tt.paths, a.Approval.Paths, tt.stored)
		}
		if a.Digest != b.Digest {
			t.Errorf("paths %s and %q give digests %s and %s", tt.paths, tt.same, a.Digest, b.Digest)
		}
		if !a.Accepts(operations.PathSmithTrinity) {
			t.Errorf("paths %s does not accept the record+approvals path", tt.paths)
		}
	}
	if got := operations.PathName(operations.PathSmithTrinity); got != "record+approvals" {
		t.Errorf("PathName(smith+trinity) = %q", got)
	}
	for _, bad := range []string{`["smith"]`, `["record"]`, `["approvals"]`, `["Record+Approvals"]`} {
		_, err := operations.Parse("p.toml", []byte("[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = [\"t\"]\n[operation.approval]\npaths = "+bad+"\n"))
		if err == nil || !strings.Contains(err.Error(), "record+approvals") {
			t.Errorf("paths %s: error %v, want one naming record+approvals", bad, err)
		}
	}
}
