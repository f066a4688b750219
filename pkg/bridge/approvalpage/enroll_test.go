package approvalpage_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/passkeytest"
)

// An enrolment on the page (docs/adr/0051-enrolment-on-the-approval-page.md):
// the link carries the service's creation options in its fragment only;
// the page hands the registration to the service, which judges it against
// the enrolment it began, once, and the page answers the trust.toml
// snippet. What a visitor sends is a stranger's input: a POST from another
// origin, or not JSON, or not the page's shape, never reaches the service,
// so it cannot spend the enrolment either.
func TestPageEnrols(t *testing.T) {
	p := newPage(t, nil)
	code, _, err := p.api.enr.IssueCode("alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	begun, err := p.api.enr.BeginWithCode(code)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := json.Marshal(begun.Options)
	if err != nil {
		t.Fatal(err)
	}
	// A credential the page's sign-in (which names none) can find.
	if sel := begun.Options.Response.AuthenticatorSelection; sel.ResidentKey != "required" || sel.RequireResidentKey == nil || !*sel.RequireResidentKey || sel.UserVerification != "required" {
		t.Errorf("the options ask for %+v, want a discoverable credential, user verified", sel)
	}
	link := approvalpage.EnrollURL(origin, opts)
	base, frag, ok := strings.Cut(link, "#")
	if !ok || base != origin+"/enroll" || strings.Contains(base, "?") {
		t.Fatalf("the link %q: want %s/enroll#OPTIONS, the options in the fragment alone", link, origin)
	}
	if got, err := base64.RawURLEncoding.DecodeString(frag); err != nil || !bytes.Equal(got, opts) {
		t.Fatalf("the fragment is not the options, base64url: %v", err)
	}

	// The page itself, with its CSP, for anyone.
	rec := httptest.NewRecorder()
	p.srv.ServeHTTP(rec, httptest.NewRequest("GET", base, nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `id="create"`) || rec.Header().Get("Content-Security-Policy") != approvalpage.CSP {
		t.Fatalf("GET /enroll: %d, CSP %q", rec.Code, rec.Header().Get("Content-Security-Policy"))
	}

	a, err := passkeytest.New()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := a.Register(opts, passkeytest.Registration{Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]json.RawMessage{"credential": reg}
	for _, tc := range []struct {
		name   string
		origin string
		ctype  string
		body   any
		want   int
	}{
		{"from another origin", "https://evil.example", "application/json", body, http.StatusForbidden},
		{"with no origin", "", "application/json", body, http.StatusForbidden},
		{"as a form", origin, "application/x-www-form-urlencoded", body, http.StatusUnsupportedMediaType},
		{"with a field the page never sends", origin, "application/json", map[string]any{"credential": json.RawMessage(reg), "principal": "root"}, http.StatusBadRequest},
		{"with a credential that is no object", origin, "application/json", map[string]any{"credential": "x"}, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(tc.body)
			r := httptest.NewRequest("POST", origin+"/api/enroll", bytes.NewReader(b))
			r.Header.Set("Content-Type", tc.ctype)
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			rec := httptest.NewRecorder()
			p.srv.ServeHTTP(rec, r)
			if rec.Code != tc.want {
				t.Errorf("%d %s, want %d", rec.Code, rec.Body, tc.want)
			}
		})
	}
	if n := p.api.finished; n != 0 {
		t.Fatalf("%d refused requests reached the service", n)
	}

	// The page's own request: the snippet of alice's new credential.
	rec = p.post(t, "/api/enroll", "", body)
	var got struct{ Principal, Credential, Snippet string }
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
		t.Fatalf("enrolling: %d %s", rec.Code, rec.Body)
	}
	if got.Principal != "alice" || got.Credential != a.CredentialID() || !strings.Contains(got.Snippet, "[[principal.passkey]]\nid = \""+a.CredentialID()+"\"") {
		t.Fatalf("enrolled %+v, want alice's credential %s and its snippet", got, a.CredentialID())
	}
	if !strings.Contains(p.log.String(), "passkey enrolled") {
		t.Errorf("the page's log does not say the enrolment: %s", p.log)
	}
	// Once: the same registration again is refused by the service.
	rec = p.post(t, "/api/enroll", "", body)
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "evidence_consumed") {
		t.Errorf("enrolling twice: %d %s, want 409 evidence_consumed", rec.Code, rec.Body)
	}
}

// A reload (the runner service's SIGHUP) takes a policy of the page's own
// origin only: one of another origin is refused, and the page goes on
// judging by the policy it had (its origin and RP ID are its listener's).
// That a reload lets a pasted passkey sign in is
// testdata/script/service_page_reload.txtar.
func TestReloadKeepsTheOrigin(t *testing.T) {
	p := newPage(t, nil)
	before := p.srv.Source().Policy
	other, _ := bridgetest.NewWithPasskey(t, "https://elsewhere.example.test")
	if err := p.srv.Reload(other.Source()); err == nil || !strings.Contains(err.Error(), origin) {
		t.Fatalf("a reload to another origin: %v, want refused naming %s", err, origin)
	}
	if p.srv.Source().Policy != before {
		t.Fatal("a refused reload changed the policy the page judges by")
	}
	again, _ := bridgetest.NewWithPasskey(t, origin)
	if err := p.srv.Reload(again.Source()); err != nil {
		t.Fatalf("a reload of the same origin: %v", err)
	}
	if p.srv.Source().Policy != again.Policy {
		t.Fatal("the page does not judge by the reloaded policy")
	}
}
