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
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's chromium (scripts/test-deps.sh installs it).
const chromiumPath = "/usr/bin/chromium"

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
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("PROD_WRITE_REQUIRE_SERVERS") == "1" {
			t.Fatalf("%s is missing and PROD_WRITE_REQUIRE_SERVERS=1: run scripts/test-deps.sh as root", chromiumPath)
		}
		t.Skipf("%s is missing (scripts/test-deps.sh installs it as root); set PROD_WRITE_REQUIRE_SERVERS=1 to fail instead", chromiumPath)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "https://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:")
	p := newPageServerAt(t, origin)
	w := p.w
	cert, spki := selfSigned(t)
	srv := &http.Server{Handler: p.srv, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("ignore-certificate-errors-spki-list", spki),
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()

	// The virtual authenticator, with alice's credential.
	if _, err := chromedp.Call(ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		t.Fatalf("WebAuthn.enable: %v", err)
	}
	va, err := chromedp.Call(ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
		Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21, Transport: webauthn.AuthenticatorTransportInternal,
		HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
		// The generated Credential always sends generateCmtgKeyOnNextOperation,
		// which an authenticator without the extension refuses.
		HasCmtgKey: true,
	}})
	if err != nil {
		t.Fatalf("WebAuthn.addVirtualAuthenticator: %v", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(w.alice.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, webauthn.AddCredential, webauthn.AddCredentialParams{AuthenticatorID: va.AuthenticatorID, Credential: &webauthn.Credential{
		CredentialID: w.alice.ID, IsResidentCredential: true, RpID: "localhost", PrivateKey: pkcs8, UserHandle: []byte("alice"), SignCount: 0,
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

	// Screenshots at phone and desktop width, in the test's directory
	// (or PROD_WRITE_SCREENSHOTS, for a reviewer to look at).
	dir := t.TempDir()
	if d := os.Getenv("PROD_WRITE_SCREENSHOTS"); d != "" {
		dir = d
	}
	for _, vp := range []struct {
		name string
		w, h int64
	}{{"phone", 390, 844}, {"desktop", 1280, 800}} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(vp.w, vp.h)); err != nil {
			t.Fatal(err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", vp.name, err)
		}
		if len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("screenshot %s: %d bytes, not a PNG", vp.name, len(png))
		}
		path := filepath.Join(dir, "approval-page-"+vp.name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}

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
