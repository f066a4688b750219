package bridgetest

import (
	"encoding/base64"
	"fmt"
	"slices"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/passkeytest"
)

// NewWithPasskey is New(t, 1) whose policy has a [passkey] table at
// origin and a further approver, "pat", holding one enrolled passkey: the
// virtual authenticator returned.
func NewWithPasskey(t testing.TB, origin string) (*World, *passkeytest.Authenticator) {
	t.Helper()
	w := New(t, 1)
	pat, err := passkeytest.New()
	if err != nil {
		t.Fatal(err)
	}
	cose, err := pat.COSE()
	if err != nil {
		t.Fatal(err)
	}
	members := append(slices.Clone(Cast), Member{ID: "pat", Roles: []string{approval.RoleApprover}})
	trust := fmt.Sprintf("[passkey]\norigin = %q\n", origin) + PolicyTOML(members) +
		fmt.Sprintf("[[principal.passkey]]\nid = %q\npublic_key = \"cose:%s\"\n", pat.CredentialID(), base64.RawURLEncoding.EncodeToString(cose))
	if w.Policy, err = approval.ParsePolicy("trust.toml", []byte(trust)); err != nil {
		t.Fatal(err)
	}
	return w, pat
}
