package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/testservers"
	"github.com/prod-write/prod-write/pkg/visible"
)

// chromiumPath is Debian's chromium (scripts/test-deps.sh installs it).
const chromiumPath = testservers.ChromiumPath

// selfSigned is a certificate for localhost and the SPKI hash Chromium is
// told to accept it by (--ignore-certificate-errors-spki-list): the page
// is then a secure context, as WebAuthn needs, without a CA installed.
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}, base64.StdEncoding.EncodeToString(sum[:])
}

// End to end in a real browser: Debian's chromium, driven by chromedp,
// with the DevTools protocol's virtual authenticator (CTAP2, internal,
// resident key, user verification) holding alice's credential, the one
// enrolled in the test's trust.toml. She opens the decision's link, sees
// nothing of the plan until she signs in with her passkey, sees the plan,
// approves with a reason; the gate is then open and the plan runs. On a
// second plan, a challenge swapped in the page records nothing, and a
// deny is recorded and the plan does not run.
// Screenshots at phone and desktop width go to the test's directory.
func TestApprovalPageInChromium(t *testing.T) {
	origin, serve := pageOrigin(t)
	p := newPageServerAt(t, origin)
	w := p.w
	serve(p.srv)
	ctx, authenticator := chromiumWithAuthenticator(t)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(w.alice.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, webauthn.AddCredential, webauthn.AddCredentialParams{AuthenticatorID: authenticator, Credential: &webauthn.Credential{
		CredentialID: w.alice.ID, IsResidentCredential: true, RpID: "localhost", PrivateKey: pkcs8, UserHandle: approval.PasskeyUserHandle("alice"), SignCount: 0,
	}}); err != nil {
		t.Fatalf("WebAuthn.addCredential: %v", err)
	}

	// Before signing in: the sign-in button, nothing of the plan.
	if err := chromedp.Do(ctx, chromedp.Navigate(origin+"/approve/"+w.fp), chromedp.WaitVisible(chromedp.CSS("#signin"))); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	body, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	if s := p.leaks(body); s != "" {
		t.Fatalf("before sign-in the page shows %q:\n%s", s, body)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#signin")), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
		msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("message").textContent`))
		t.Fatalf("signing in: %v (page says %q)", err, msg)
	}
	body, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{w.fp, "config-push on staging", "signed in as alice", "Certainty record", w.record, "Uses and expiry"} {
		if !strings.Contains(body, want) {
			t.Fatalf("signed in, the page does not show %q:\n%s", want, body)
		}
	}

	// Every argv element in a box of its own, as visible.Word shows it
	// (docs/adr/0062-showing-agent-text.md).
	_, stdout, _ := w.h.run("status", w.fp, "--json")
	var status struct {
		Plan struct {
			Argv []string `json:"argv"`
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(stdout), &status); err != nil || len(status.Plan.Argv) < 2 {
		t.Fatalf("status --json: %v\n%s", err, stdout)
	}
	boxes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("dd code.arg"), (e) => e.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if want := wordsOf(status.Plan.Argv); !slices.Equal(boxes, want) {
		t.Fatalf("the page boxes argv as %q, want %q", boxes, want)
	}

	// Screenshots at phone and desktop width, in the test's directory
	// (or PROD_WRITE_SCREENSHOTS, for a reviewer to look at).
	shot(t, ctx, "approval-page-phone", 390, 844)
	shot(t, ctx, "approval-page-desktop", 1280, 800)

	// Approve, with a reason, signed by the passkey.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#reason"), "read the diff"), chromedp.Click(chromedp.CSS("#approve"))); err != nil {
		t.Fatal(err)
	}
	msg, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const m = document.getElementById("message").textContent; return m.startsWith("Recorded") || m.startsWith("Not recorded") ? m : false })()`))
	if err != nil {
		t.Fatalf("approving: %v", err)
	}
	if !strings.HasPrefix(msg, "Recorded: approve by alice (user verified)") {
		t.Fatalf("after approve the page says %q", msg)
	}
	// Chromium returned the credential's user handle, the page relayed
	// it, and the stored decision keeps it for the gate to check
	// (docs/adr/0043-passkey-assertions-as-evidence.md).
	if ds := w.passkeyDecisions(t, w.fp); len(ds) != 1 || !bytes.Equal(ds[0].Assertion.UserHandle, approval.PasskeyUserHandle("alice")) {
		t.Fatalf("the stored passkey decisions %+v; want one carrying alice's user handle", ds)
	}
	code, stdout, _ := w.h.run("status", w.fp, "--json")
	var st struct {
		Allowed bool `json:"allowed"`
	}
	if json.Unmarshal([]byte(stdout), &st) != nil || !st.Allowed {
		t.Fatalf("status after the page's approval: %d %s", code, stdout)
	}
	w.h.env["DEPLOY_TOKEN"] = "t"
	if err := os.MkdirAll(filepath.Join(w.h.dir, "srv", "staging"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := w.h.run("run", w.fp); code != 0 {
		t.Fatalf("run approved in the browser: %d %s", code, stderr)
	}

	// A second plan. The page's state tampered with: the challenge the
	// server handed over is swapped before the passkey signs it. The
	// assertion is then of another statement, and nothing is recorded.
	fp2, _ := w.planAndFile(t, "api")
	decided := func(what string) string {
		t.Helper()
		msg, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const m = document.getElementById("message").textContent; return m.startsWith("Recorded") || m.startsWith("Not recorded") ? m : false })()`))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return msg
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(origin+"/approve/"+fp2), chromedp.WaitVisible(chromedp.CSS("#approve"))); err != nil {
		t.Fatalf("opening the second plan (signed in still): %v", err)
	}
	tamper := `(() => { const f = window.fetch; window.fetch = async (u, i) => { const r = await f(u, i);
		if (!String(u).endsWith("/api/challenge")) return r;
		const o = await r.json(); o.publicKey.challenge = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
		return new Response(JSON.stringify(o), { status: r.status, headers: { "Content-Type": "application/json" } }); }; return true })()`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](tamper)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#approve"))); err != nil {
		t.Fatal(err)
	}
	if msg := decided("approving with a swapped challenge"); !strings.HasPrefix(msg, "Not recorded") {
		t.Fatalf("an approval over a swapped challenge: the page says %q", msg)
	}
	if ev := p.w.evidence(t, fp2); ev != 1 {
		t.Fatalf("after the swapped challenge the plan has %d records, want its certainty record only", ev)
	}

	// Denied the same way, untampered (the page loaded again).
	if err := chromedp.Do(ctx, chromedp.Navigate(origin+"/approve/"+fp2), chromedp.WaitVisible(chromedp.CSS("#deny")),
		chromedp.SendKeys(chromedp.CSS("#reason"), "not today"), chromedp.Click(chromedp.CSS("#deny"))); err != nil {
		t.Fatal(err)
	}
	if msg := decided("denying"); !strings.HasPrefix(msg, "Recorded: deny by alice (user verified)") {
		t.Fatalf("after deny the page says %q", msg)
	}
	if code, _, _ := w.h.run("run", fp2); code == 0 {
		t.Fatal("a plan denied in the browser ran")
	}
}

// pageOrigin listens on a port of localhost and returns the page's origin
// there and serve, which serves h (again, when the page is made anew) over
// TLS with a certificate the browser of chromiumWithAuthenticator accepts.
func pageOrigin(t *testing.T) (string, func(http.Handler)) {
	t.Helper()
	requireChromium(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "https://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:")
	var current atomic.Pointer[http.Handler]
	cert, spki := selfSigned(t)
	testSPKI.Store(&spki)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := current.Load()
		if h == nil {
			http.Error(w, "no page yet", http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, r)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return origin, func(h http.Handler) { current.Store(&h) }
}

// testSPKI is the hash of pageOrigin's certificate key, which
// chromiumWithAuthenticator's browser is told to accept.
var testSPKI atomic.Pointer[string]

func requireChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("PROD_WRITE_REQUIRE_SERVERS") == "1" {
			t.Fatalf("%s is missing and PROD_WRITE_REQUIRE_SERVERS=1: run scripts/test-deps.sh as root", chromiumPath)
		}
		t.Skipf("%s is missing (scripts/test-deps.sh installs it as root); set PROD_WRITE_REQUIRE_SERVERS=1 to fail instead", chromiumPath)
	}
}

// chromiumWithAuthenticator starts Debian's chromium with a virtual
// authenticator holding no credential (testservers.StartChromium),
// accepting pageOrigin's certificate; it returns the browser's context
// (90 s) and the authenticator's id.
func chromiumWithAuthenticator(t *testing.T) (context.Context, webauthn.AuthenticatorID) {
	t.Helper()
	c, err := testservers.StartChromium(*testSPKI.Load())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx, cancel := c.Within(90 * time.Second)
	t.Cleanup(cancel)
	return ctx, c.Authenticator
}

// Enrolment on the approval page, end to end in a real browser
// (docs/adr/0051-enrolment-on-the-approval-page.md). bob runs `passkey
// enroll` with his key and opens the link it prints in Chromium, whose
// virtual authenticator holds no credential. The page shows whom he enrols
// as, the authenticator makes the credential, the service verifies it, and
// the page shows the trust.toml snippet of exactly that credential. Until
// root pastes it, bob cannot sign in; once it is pasted (and the page loads
// the policy anew), bob signs in with it and approves, and the gate counts
// his passkey's approval. The link, opened again, enrols nothing.
func TestEnrolmentOnTheApprovalPageInChromium(t *testing.T) {
	origin, serve := pageOrigin(t)
	p := newPageServerAt(t, origin)
	w := p.w
	serve(p.srv)
	ctx, authenticator := chromiumWithAuthenticator(t)

	code, link, stderr := w.h.run("passkey", "enroll", "--key", w.h.key("bob"))
	link = strings.TrimSpace(link)
	if code != 0 || !strings.HasPrefix(link, origin+"/enroll#") || strings.Contains(link, "?") {
		t.Fatalf("passkey enroll: exit %d, stdout %q, stderr %s; want the page's link, the options in its fragment", code, link, stderr)
	}
	if !strings.Contains(stderr, "enrolment of bob begun (authorised by its key)") {
		t.Errorf("passkey enroll says %q", stderr)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("#create"))); err != nil {
		msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("message").textContent`))
		t.Fatalf("opening the enrolment link: %v (page says %q)", err, msg)
	}
	who, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("enrol-principal").textContent + " at " + document.getElementById("enrol-rp").textContent`))
	if err != nil || who != "bob at localhost" {
		t.Fatalf("the page enrols %q (%v), want bob at localhost", who, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#create"))); err != nil {
		t.Fatal(err)
	}
	enrolled := func(what string) string {
		t.Helper()
		msg, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const m = document.getElementById("message").textContent; return m.startsWith("Enrolled") || m.startsWith("Not enrolled") ? m : false })()`))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return msg
	}
	if msg := enrolled("enrolling"); !strings.HasPrefix(msg, "Enrolled: passkey ") || !strings.HasSuffix(msg, " of bob.") {
		t.Fatalf("after Create passkey the page says %q", msg)
	}
	snippet, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("snippet").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := chromedp.Call(ctx, webauthn.GetCredentials, webauthn.GetCredentialsParams{AuthenticatorID: authenticator})
	if err != nil || len(creds.Credentials) != 1 {
		t.Fatalf("the authenticator holds %v (%v), want the one credential made", creds, err)
	}
	made := base64.RawURLEncoding.EncodeToString(creds.Credentials[0].CredentialID)
	if !strings.Contains(snippet, "[[principal.passkey]]\nid = \""+made+"\"\n") || !strings.Contains(snippet, `root adds it below [[principal]] id = "bob"`) {
		t.Fatalf("the snippet is not of the credential made (%s):\n%s", made, snippet)
	}
	shot(t, ctx, "enrolment-page-phone", 390, 844)

	// Not in the policy yet: bob cannot sign in.
	signIn := func() string {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(origin+"/approve/"+w.fp), chromedp.WaitVisible(chromedp.CSS("#signin")), chromedp.Click(chromedp.CSS("#signin"))); err != nil {
			t.Fatal(err)
		}
		msg, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { if (document.getElementById("approve")) return "signed in"; const m = document.getElementById("message").textContent; return m.startsWith("Sign-in failed") ? m : false })()`))
		if err != nil {
			t.Fatalf("signing in: %v", err)
		}
		return msg
	}
	if msg := signIn(); msg == "signed in" {
		t.Fatal("bob signed in with a passkey root has not added")
	}

	// Root pastes it; the page loads the policy anew.
	pasteUnder(t, w.h, "bob", snippet)
	serve(w.bridgeService(t, origin).Page)
	if msg := signIn(); msg != "signed in" {
		t.Fatalf("bob's pasted passkey: %s", msg)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#approve"))); err != nil {
		t.Fatal(err)
	}
	msg, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const m = document.getElementById("message").textContent; return m.startsWith("Recorded") || m.startsWith("Not recorded") ? m : false })()`))
	if err != nil || !strings.HasPrefix(msg, "Recorded: approve by bob (user verified)") {
		t.Fatalf("bob approving with the enrolled passkey: %q %v", msg, err)
	}
	// The user handle enrolment gave the credential comes back with the
	// assertion, and it is the one the gate checks against bob.
	if ds := w.passkeyDecisions(t, w.fp); len(ds) != 1 || !bytes.Equal(ds[0].Assertion.UserHandle, approval.PasskeyUserHandle("bob")) {
		t.Fatalf("the stored passkey decisions %+v; want one carrying bob's user handle", ds)
	}
	code, stdout, _ := w.h.run("status", w.fp, "--json")
	var st struct {
		Allowed bool `json:"allowed"`
	}
	if json.Unmarshal([]byte(stdout), &st) != nil || !st.Allowed {
		t.Fatalf("status after bob's passkey approval: %d %s", code, stdout)
	}
	// The link again (loaded anew: a link differing only in its fragment
	// would not be): the enrolment is spent. (Last: the authenticator
	// replaces bob's resident credential with the one it makes now.)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank"), chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("#create")), chromedp.Click(chromedp.CSS("#create"))); err != nil {
		t.Fatal(err)
	}
	if msg := enrolled("enrolling again"); !strings.HasPrefix(msg, "Not enrolled") {
		t.Fatalf("the link opened again: the page says %q", msg)
	}
}

// shot saves a screenshot of the page at w×h in the test's directory (or
// PROD_WRITE_SCREENSHOTS).
func shot(t *testing.T, ctx context.Context, name string, w, h int64) {
	t.Helper()
	dir := t.TempDir()
	if d := os.Getenv("PROD_WRITE_SCREENSHOTS"); d != "" {
		dir = d
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(w, h)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func wordsOf(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = visible.Word(a)
	}
	return out
}
