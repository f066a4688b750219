package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prod-write/prod-write/pkg/testservers"
	"github.com/rogpeppe/go-internal/testscript"
)

// chromiumPath is Debian's chromium (scripts/test-deps.sh installs it).
const chromiumPath = testservers.ChromiumPath

// browser is one script's approver's browser: Chromium, driven over the
// DevTools protocol, with a virtual authenticator (CTAP2, internal,
// resident keys, user verification), and the TLS proxy it reaches the
// approval page through.
type browser struct {
	spki   string // the proxy certificate's SPKI hash, which Chromium accepts
	origin string // https://localhost:PORT
	ctx    context.Context
}

var (
	browsersMu sync.Mutex
	browsers   = map[*testscript.TestScript]*browser{}
)

// cmdBrowser is an approver at a real browser, on the approval page that
// bridge serve serves on page_listen behind TLS:
//
//	browser proxy ADDR             a TLS proxy for http://ADDR, on a port of
//	                               localhost; sets $PAGE_ORIGIN to its origin
//	browser enrol LINKFILE         open the enrolment link in LINKFILE (what
//	                               passkey enroll printed) and create the
//	                               passkey: the snippet the page shows to
//	                               stdout, the page's message to stderr
//	browser decide VERDICT REASON  open the first $PAGE_ORIGIN/approve/ link
//	                               in the last command's stdout (a bridge
//	                               message), sign in with the passkey, and
//	                               approve or deny: the page's message to
//	                               stdout
//
// Without chromium it fails: a script using it starts with
// `[!chromium] skip`, which skips only where PROD_WRITE_REQUIRE_SERVERS is
// not 1 (make test and CI set it).
func cmdBrowser(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: browser proxy ADDR | browser enrol LINKFILE | browser decide VERDICT REASON")
	}
	browsersMu.Lock()
	b := browsers[ts]
	browsersMu.Unlock()
	switch {
	case args[0] == "proxy" && len(args) == 2:
		if _, err := os.Stat(chromiumPath); err != nil {
			ts.Fatalf("%s is missing: run scripts/test-deps.sh as root (a script without [chromium] skip runs only where it is)", chromiumPath)
		}
		b = &browser{}
		b.proxy(ts, args[1])
		browsersMu.Lock()
		browsers[ts] = b
		browsersMu.Unlock()
		ts.Defer(func() {
			browsersMu.Lock()
			delete(browsers, ts)
			browsersMu.Unlock()
		})
		ts.Setenv("PAGE_ORIGIN", b.origin)
	case b == nil:
		ts.Fatalf("browser: run browser proxy first")
	case args[0] == "enrol" && len(args) == 2:
		b.start(ts)
		b.enrol(ts, strings.TrimSpace(ts.ReadFile(args[1])))
	case args[0] == "decide" && len(args) == 3:
		b.start(ts)
		link := regexp.MustCompile(regexp.QuoteMeta(b.origin) + `/approve/sha256:[0-9a-f]{64}`).FindString(ts.ReadFile("stdout"))
		if link == "" {
			ts.Fatalf("browser decide: the last command's stdout holds no link of %s/approve/", b.origin)
		}
		b.decide(ts, link, args[1], args[2])
	default:
		ts.Fatalf("usage: browser proxy ADDR | browser enrol LINKFILE | browser decide VERDICT REASON")
	}
}

func (b *browser) proxy(ts *testscript.TestScript, addr string) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ts.Check(err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	ts.Check(err)
	spki, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	ts.Check(err)
	sum := sha256.Sum256(spki)
	b.spki = base64.StdEncoding.EncodeToString(sum[:])
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	b.origin = "https://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:")
	// A TLS terminator, as docs/BRIDGES.md's deployment puts in front of
	// page_listen: the browser's own request, Origin header and all.
	target := &url.URL{Scheme: "http", Host: addr}
	srv := &http.Server{Handler: &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = r.In.Host }},
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: k}}}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	ts.Defer(func() { _ = srv.Close() })
}

// start starts the browser once (testservers.StartChromium).
func (b *browser) start(ts *testscript.TestScript) {
	if b.ctx != nil {
		return
	}
	c, err := testservers.StartChromium(b.spki)
	ts.Check(err)
	ts.Defer(c.Stop)
	b.ctx = c.Ctx
}

// step runs actions within a minute.
func (b *browser) step(ts *testscript.TestScript, what string, actions ...chromedp.Action[chromedp.Void]) {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		msg, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(document.getElementById("message") || {}).textContent || ""`))
		ts.Fatalf("browser: %s: %v (the page says %q)", what, err, msg)
	}
}

// message waits for the page's message to start with one of prefixes.
func (b *browser) message(ts *testscript.TestScript, what string, prefixes ...string) string {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	var conds []string
	for _, p := range prefixes {
		conds = append(conds, fmt.Sprintf("m.startsWith(%q)", p))
	}
	msg, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const m = document.getElementById("message").textContent; return `+strings.Join(conds, " || ")+` ? m : false })()`))
	if err != nil {
		ts.Fatalf("browser: %s: %v", what, err)
	}
	return msg
}

func (b *browser) enrol(ts *testscript.TestScript, link string) {
	if !strings.HasPrefix(link, b.origin+"/enroll#") {
		ts.Fatalf("browser enrol: %q is no enrolment link of %s", link, b.origin)
	}
	b.step(ts, "opening the enrolment link", chromedp.Navigate("about:blank"), chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS("#create")))
	who, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById("enrol-principal").textContent`))
	ts.Check(err)
	fmt.Fprintf(ts.Stderr(), "enrolling: %s\n", who)
	b.step(ts, "creating the passkey", chromedp.Click(chromedp.CSS("#create")))
	msg := b.message(ts, "enrolling", "Enrolled", "Not enrolled")
	fmt.Fprintln(ts.Stderr(), msg)
	if !strings.HasPrefix(msg, "Enrolled") {
		ts.Fatalf("browser enrol: %s", msg)
	}
	snippet, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById("snippet").textContent`))
	ts.Check(err)
	fmt.Fprint(ts.Stdout(), snippet)
}

func (b *browser) decide(ts *testscript.TestScript, link, verdict, reason string) {
	if verdict != "approve" && verdict != "deny" {
		ts.Fatalf("browser decide: VERDICT is approve or deny")
	}
	b.step(ts, "opening "+link, chromedp.Navigate("about:blank"), chromedp.Navigate(link))
	// Signed in already (the session cookie), or asked to sign in.
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	state, err := chromedp.Run(ctx, chromedp.Poll[string](fmt.Sprintf(`(() => { if (document.getElementById(%q)) return "decide"; const l = document.getElementById("login"); return l && !l.hidden ? "login" : false })()`, verdict)))
	if err != nil {
		ts.Fatalf("browser: opening %s: %v", link, err)
	}
	if state == "login" {
		b.step(ts, "signing in", chromedp.Click(chromedp.CSS("#signin")), chromedp.WaitVisible(chromedp.CSS("#"+verdict)))
	}
	b.step(ts, verdict, chromedp.SendKeys(chromedp.CSS("#reason"), reason), chromedp.Click(chromedp.CSS("#"+verdict)))
	fmt.Fprintln(ts.Stdout(), b.message(ts, verdict, "Recorded", "Not recorded"))
}
