package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/bridge/githubbridge"
	"github.com/prod-write/prod-write/pkg/bridge/slackbridge"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/passkeytest"
	"github.com/prod-write/prod-write/pkg/store"
)

// pageServer is the approval page of w, as the bridge service serves it:
// its views from the bridge's source, its decisions through the typed
// API with the bridge's key.
type pageServer struct {
	w      *pageWorld
	srv    *approvalpage.Server
	viewer *passkeytest.Authenticator // a passkey of viewer, who is no approver
	origin string
	// bridges is the bridge service the page is part of.
	bridges *BridgeService
}

const pageRPID = "approve.example.test"

func newPageServer(t *testing.T) *pageServer {
	t.Helper()
	return newPageServerAt(t, testPageOrigin)
}

// newPageServerAt is the page of a world whose [passkey] origin is
// origin, made as the bridge service makes it from [bridge] page_listen.
func newPageServerAt(t *testing.T, origin string) *pageServer {
	t.Helper()
	w := newPageWorldAt(t, origin)
	viewer, err := passkeytest.NewFor("viewer")
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := w.h.run("keygen", "--out", w.h.key("viewer"), "--json")
	var kg struct {
		PublicKey string `json:"public_key"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &kg) != nil {
		t.Fatalf("keygen: %d %s %s", code, stdout, stderr)
	}
	appendTrust(t, w.h, fmt.Sprintf("\n[[principal]]\nid = \"viewer\"\nroles = [\"operator\"]\nkey = %q\n", kg.PublicKey)+credentialSnippet(t, viewer))
	cfgFile, err := os.OpenFile(filepath.Join(w.h.dir, "prod-write.toml"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(cfgFile, "\n[bridge]\nkey = %q\npage_listen = \"127.0.0.1:0\"\n", w.h.key("page")); err != nil {
		t.Fatal(err)
	}
	if err := cfgFile.Close(); err != nil {
		t.Fatal(err)
	}
	bs := w.bridgeService(t, origin)
	return &pageServer{w: w, srv: bs.Page, viewer: viewer, origin: origin, bridges: bs}
}

// bridgeService is the bridge service of w's configuration, as loaded
// now, with its approval page at origin.
func (w *pageWorld) bridgeService(t *testing.T, origin string) *BridgeService {
	t.Helper()
	f := w.factory("")
	c, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Policy(c)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := f.Registry(c)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := localapi.NewBridgeService(&f.Env, c, reg, p, nil)
	if err != nil {
		t.Fatalf("the bridge service with page_listen: %v", err)
	}
	if bs.Page == nil || bs.Page.Origin() != origin {
		t.Fatalf("the bridge service has no approval page of %s", origin)
	}
	return bs
}

// do sends a request to the page as a browser at origin would, with the
// session cookie when one is given, and returns the answer.
func (p *pageServer) do(t *testing.T, method, path, origin, cookie string, body any) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	r := httptest.NewRequest(method, p.origin+path, rd)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: approvalpage.CookieName, Value: cookie})
	}
	rec := httptest.NewRecorder()
	p.srv.ServeHTTP(rec, r)
	return rec
}

// options decodes a navigator.credentials.get options answer.
func options(t *testing.T, rec *httptest.ResponseRecorder) (challenge []byte, allow []string) {
	t.Helper()
	var o struct {
		PublicKey struct {
			Challenge        string `json:"challenge"`
			RPID             string `json:"rpId"`
			UserVerification string `json:"userVerification"`
			AllowCredentials []struct {
				ID string `json:"id"`
			} `json:"allowCredentials"`
		} `json:"publicKey"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &o) != nil || o.PublicKey.RPID != pageRPID || o.PublicKey.UserVerification != "required" {
		t.Fatalf("options: %d %s", rec.Code, rec.Body)
	}
	ch, err := base64.RawURLEncoding.DecodeString(o.PublicKey.Challenge)
	if err != nil || len(ch) != 32 {
		t.Fatalf("options' challenge %q", o.PublicKey.Challenge)
	}
	for _, c := range o.PublicKey.AllowCredentials {
		allow = append(allow, c.ID)
	}
	return ch, allow
}

// login signs a's holder in and returns the session cookie.
func (p *pageServer) login(t *testing.T, a *passkeytest.Authenticator) string {
	t.Helper()
	ch, _ := options(t, p.do(t, "POST", "/api/login/begin", testPageOrigin, "", struct{}{}))
	cred, err := a.AssertJSON(ch, testPageOrigin, pageRPID)
	if err != nil {
		t.Fatal(err)
	}
	rec := p.do(t, "POST", "/api/login/finish", testPageOrigin, "", map[string]any{"credential": json.RawMessage(cred)})
	if rec.Code != http.StatusOK {
		t.Fatalf("login finish: %d %s", rec.Code, rec.Body)
	}
	for _, c := range rec.Result().Cookies() {
		if c.Name == approvalpage.CookieName {
			if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" || len(c.Value) < 40 {
				t.Fatalf("the session cookie is %+v: want HttpOnly, Secure, SameSite=Strict, Path=/, no Domain, random", c)
			}
			return c.Value
		}
	}
	t.Fatal("login set no session cookie")
	return ""
}

// leaks reports the first thing of the plan body shows.
func (p *pageServer) leaks(body string) string {
	for _, s := range []string{p.w.fp, strings.TrimPrefix(p.w.fp, "sha256:")[:16], "config-push", "looked at it", p.w.record[:16], "install", "web.toml"} {
		if strings.Contains(body, s) {
			return s
		}
	}
	return ""
}

// An approver signs in with her passkey, sees the plan from the bridge's
// view, approves with her passkey over the statement the service issued,
// and the plan then runs.
func TestApprovalPageApproves(t *testing.T) {
	p := newPageServer(t)
	w := p.w
	// The decision's link, in status and in the bridges' messages.
	link := testPageOrigin + "/approve/" + w.fp
	if _, stdout, _ := w.h.run("status", w.fp); !strings.Contains(stdout, "page:        "+link+" ") {
		t.Fatalf("status does not link the approval page:\n%s", stdout)
	}
	if _, stdout, _ := w.h.run("status", w.fp, "--json"); !strings.Contains(stdout, `"approval_page": "`+link+`"`) {
		t.Fatalf("status --json has no approval_page:\n%s", stdout)
	}
	bv, err := bridge.Describe(p.bridges.Attestor.Source, w.fp, w.record, w.h.now)
	if err != nil {
		t.Fatal(err)
	}
	if body := githubbridge.Body(bv); !strings.Contains(body, "with your passkey: "+link) {
		t.Fatalf("the GitHub message does not link the page:\n%s", body)
	}
	if b, err := json.Marshal(slackbridge.Blocks(bv)); err != nil || !strings.Contains(string(b), "with your passkey: "+link) {
		t.Fatalf("the Slack message does not link the page: %s", b)
	}
	cookie := p.login(t, w.alice)
	rec := p.do(t, "GET", "/api/decision/"+w.fp, "", cookie, nil)
	var v struct {
		Fingerprint string   `json:"fingerprint"`
		Operation   string   `json:"operation"`
		Target      string   `json:"target"`
		Argv        []string `json:"argv"`
		Env         []struct {
			Name string `json:"name"`
		} `json:"env"`
		Files  []json.RawMessage `json:"files"`
		Record *struct {
			ID      string `json:"id"`
			Summary string `json:"summary"`
		} `json:"record"`
		Uses []string `json:"uses"`
		Gate string   `json:"gate"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &v) != nil {
		t.Fatalf("decision: %d %s", rec.Code, rec.Body)
	}
	if v.Fingerprint != w.fp || v.Operation != "config-push" || v.Target != "staging" || len(v.Argv) == 0 || len(v.Env) == 0 || len(v.Files) != 1 ||
		v.Record == nil || v.Record.ID != w.record || v.Record.Summary != "s" || len(v.Uses) == 0 || v.Gate == "open" {
		t.Fatalf("the view: %s", rec.Body)
	}
	if strings.Contains(rec.Body.String(), "DEPLOY_TOKEN=") {
		t.Fatal("the view shows an environment value")
	}
	ch, allow := options(t, p.do(t, "POST", "/api/challenge", testPageOrigin, cookie, map[string]string{"fingerprint": w.fp, "decision": "approve"}))
	if len(allow) != 1 || allow[0] != w.alice.CredentialID() {
		t.Fatalf("the challenge allows %v, want alice's credential only", allow)
	}
	cred, err := w.alice.AssertJSON(ch, testPageOrigin, pageRPID)
	if err != nil {
		t.Fatal(err)
	}
	rec = p.do(t, "POST", "/api/decide", testPageOrigin, cookie, map[string]any{"fingerprint": w.fp, "decision": "approve", "reason": "looked at it", "credential": json.RawMessage(cred)})
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"approver":"alice"`) || !strings.Contains(rec.Body.String(), `"user_verified":true`) {
		t.Fatalf("decide: %d %s", rec.Code, rec.Body)
	}
	// The page relays the user handle the passkey returned, and the
	// stored decision keeps it (docs/adr/0043-passkey-assertions-as-evidence.md).
	if ds := w.passkeyDecisions(t, w.fp); len(ds) != 1 || !bytes.Equal(ds[0].Assertion.UserHandle, approval.PasskeyUserHandle("alice")) {
		t.Fatalf("the stored passkey decisions %+v; want one carrying alice's user handle", ds)
	}
	w.h.env["DEPLOY_TOKEN"] = "t"
	if err := os.MkdirAll(filepath.Join(w.h.dir, "srv", "staging"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := w.h.run("run", w.fp); code != 0 {
		t.Fatalf("run approved on the page: %d %s", code, stderr)
	}
}

// What a visitor of the page cannot make it do: read anything of a plan
// without an approver's session (no cookie, a made-up one, a session of a
// principal who is no approver), sign in with an assertion that is not
// a fresh one of an enrolled passkey at this origin, reach a
// state-changing endpoint from another origin or without a JSON body,
// or have a decision stored whose challenge was swapped in the page.
// Every answer carries the headers that keep the page to itself.
func TestApprovalPageRefuses(t *testing.T) {
	p := newPageServer(t)
	w := p.w
	for _, path := range []string{"/", "/approve/" + w.fp, "/assets/app.js", "/assets/app.css", "/api/session", "/api/decision/" + w.fp} {
		rec := p.do(t, "GET", path, "", "", nil)
		h := rec.Header()
		if h.Get("Content-Security-Policy") != approvalpage.CSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: headers %v", path, h)
		}
		if s := p.leaks(rec.Body.String()); s != "" {
			t.Errorf("GET %s without a session shows %q: %s", path, s, rec.Body)
		}
	}
	if !strings.Contains(approvalpage.CSP, "default-src 'none'") || !strings.Contains(approvalpage.CSP, "frame-ancestors 'none'") {
		t.Fatal("the CSP is not strict")
	}
	noPlan := func(t *testing.T, rec *httptest.ResponseRecorder, status int) {
		t.Helper()
		if rec.Code != status {
			t.Fatalf("answered %d %s, want %d", rec.Code, rec.Body, status)
		}
		if s := p.leaks(rec.Body.String()); s != "" {
			t.Fatalf("the answer shows %q: %s", s, rec.Body)
		}
	}
	decide := map[string]string{"fingerprint": w.fp, "decision": "approve"}

	t.Run("no session", func(t *testing.T) {
		noPlan(t, p.do(t, "GET", "/api/decision/"+w.fp, "", "", nil), http.StatusUnauthorized)
		noPlan(t, p.do(t, "POST", "/api/challenge", testPageOrigin, "", decide), http.StatusUnauthorized)
		noPlan(t, p.do(t, "POST", "/api/decide", testPageOrigin, "", decide), http.StatusUnauthorized)
	})
	t.Run("a made-up session", func(t *testing.T) {
		noPlan(t, p.do(t, "GET", "/api/decision/"+w.fp, "", strings.Repeat("A", 43), nil), http.StatusUnauthorized)
	})
	t.Run("a session of a principal who is no approver", func(t *testing.T) {
		cookie := p.login(t, p.viewer)
		noPlan(t, p.do(t, "GET", "/api/decision/"+w.fp, "", cookie, nil), http.StatusForbidden)
		noPlan(t, p.do(t, "POST", "/api/challenge", testPageOrigin, cookie, decide), http.StatusForbidden)
	})
	login := func(t *testing.T, a *passkeytest.Authenticator, origin string) (*httptest.ResponseRecorder, []byte) {
		t.Helper()
		ch, _ := options(t, p.do(t, "POST", "/api/login/begin", testPageOrigin, "", struct{}{}))
		// The RP ID stays the page's: the origin alone is wrong.
		cred, err := a.AssertJSON(ch, origin, pageRPID)
		if err != nil {
			t.Fatal(err)
		}
		return p.do(t, "POST", "/api/login/finish", testPageOrigin, "", map[string]any{"credential": json.RawMessage(cred)}), cred
	}
	t.Run("a sign-in assertion used twice", func(t *testing.T) {
		rec, cred := login(t, w.alice, testPageOrigin)
		if rec.Code != http.StatusOK {
			t.Fatalf("first sign-in: %d %s", rec.Code, rec.Body)
		}
		noPlan(t, p.do(t, "POST", "/api/login/finish", testPageOrigin, "", map[string]any{"credential": json.RawMessage(cred)}), http.StatusUnauthorized)
	})
	t.Run("a sign-in over a challenge the page did not issue", func(t *testing.T) {
		cred, err := w.alice.AssertJSON(make([]byte, 32), testPageOrigin, pageRPID)
		if err != nil {
			t.Fatal(err)
		}
		noPlan(t, p.do(t, "POST", "/api/login/finish", testPageOrigin, "", map[string]any{"credential": json.RawMessage(cred)}), http.StatusUnauthorized)
	})
	t.Run("a sign-in with a passkey not in trust.toml", func(t *testing.T) {
		other, err := passkeytest.New()
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := login(t, other, testPageOrigin)
		noPlan(t, rec, http.StatusUnauthorized)
	})
	t.Run("a sign-in made at another origin", func(t *testing.T) {
		rec, _ := login(t, w.alice, "https://approve.evil.test")
		noPlan(t, rec, http.StatusUnauthorized)
	})
	t.Run("a sign-in with a bad signature", func(t *testing.T) {
		ch, _ := options(t, p.do(t, "POST", "/api/login/begin", testPageOrigin, "", struct{}{}))
		cred, err := w.alice.AssertJSON(ch, testPageOrigin, pageRPID)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(cred, &m); err != nil {
			t.Fatal(err)
		}
		m["response"].(map[string]any)["signature"] = base64.RawURLEncoding.EncodeToString([]byte("not a signature"))
		noPlan(t, p.do(t, "POST", "/api/login/finish", testPageOrigin, "", map[string]any{"credential": m}), http.StatusUnauthorized)
	})
	cookie := p.login(t, w.alice)
	t.Run("a POST from another origin", func(t *testing.T) {
		noPlan(t, p.do(t, "POST", "/api/challenge", "https://evil.test", cookie, decide), http.StatusForbidden)
		noPlan(t, p.do(t, "POST", "/api/challenge", "", cookie, decide), http.StatusForbidden)
	})
	t.Run("a POST that is not JSON", func(t *testing.T) {
		r := httptest.NewRequest("POST", testPageOrigin+"/api/challenge", strings.NewReader("fingerprint="+w.fp+"&decision=approve"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Origin", testPageOrigin)
		r.AddCookie(&http.Cookie{Name: approvalpage.CookieName, Value: cookie})
		rec := httptest.NewRecorder()
		p.srv.ServeHTTP(rec, r)
		noPlan(t, rec, http.StatusUnsupportedMediaType)
	})
	t.Run("a GET of a state-changing endpoint", func(t *testing.T) {
		rec := p.do(t, "GET", "/api/challenge", "", cookie, nil)
		if rec.Code != http.StatusMethodNotAllowed {
			t.Fatalf("GET /api/challenge: %d", rec.Code)
		}
	})
	t.Run("another principal's passkey in the session", func(t *testing.T) {
		ch, _ := options(t, p.do(t, "POST", "/api/challenge", testPageOrigin, cookie, decide))
		cred, err := p.viewer.AssertJSON(ch, testPageOrigin, pageRPID)
		if err != nil {
			t.Fatal(err)
		}
		rec := p.do(t, "POST", "/api/decide", testPageOrigin, cookie, map[string]any{"fingerprint": w.fp, "decision": "approve", "credential": json.RawMessage(cred)})
		if rec.Code != http.StatusForbidden {
			t.Fatalf("decide in alice's session with viewer's passkey: %d %s; want 403", rec.Code, rec.Body)
		}
	})
	t.Run("a challenge swapped in the page", func(t *testing.T) {
		st, err := store.OpenDir(filepath.Join(w.h.dir, "state", "store"))
		if err != nil {
			t.Fatal(err)
		}
		before, _, _ := st.Evidence(w.fp)
		options(t, p.do(t, "POST", "/api/challenge", testPageOrigin, cookie, decide))
		swapped := make([]byte, 32)
		swapped[0] = 1
		cred, err := w.alice.AssertJSON(swapped, testPageOrigin, pageRPID)
		if err != nil {
			t.Fatal(err)
		}
		rec := p.do(t, "POST", "/api/decide", testPageOrigin, cookie, map[string]any{"fingerprint": w.fp, "decision": "approve", "credential": json.RawMessage(cred)})
		// Refused by the page itself, which verifies the assertion
		// against the statement it asked for before it signs anything
		// (the service would refuse it too).
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("decide with a swapped challenge: %d %s; want the page to refuse it (401)", rec.Code, rec.Body)
		}
		if after, _, _ := st.Evidence(w.fp); len(after) != len(before) {
			t.Fatal("a decision over a swapped challenge was stored")
		}
	})
}
