package netbackend

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
)

// testPKI is a test CA and a server certificate it issued for 127.0.0.1,
// written as PEM files: cert (the chain, leaf first) and key (the leaf's
// PKCS#8 key, mode 0600).
type testPKI struct {
	pool      *x509.CertPool
	cert, key string

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "prod-write test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := testPKI{pool: x509.NewCertPool(), cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem"), ca: ca, caKey: caKey}
	p.pool.AddCert(ca)
	p.issue(t, 2, p.cert, p.key)
	return p
}

// issue writes a new server certificate of serial for 127.0.0.1, with a
// key of its own, to cert and key (mode 0600), each by a rename, as a
// renewal would.
func (p testPKI) issue(t *testing.T, serial int64, cert, key string) {
	t.Helper()
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, p.ca, &leafKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.ca.Raw})...)
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600}, {cert, chain, 0o644}} {
		tmp := f.path + ".new"
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
}

// With [service] mcp_tls_cert and mcp_tls_key, MCP is served over HTTPS
// only: a client that trusts the CA connects and initializes, one that
// does not is refused by its own verification, and plain HTTP is no MCP.
func TestServeMCPHTTPOverTLS(t *testing.T) {
	p := newTestPKI(t)
	addr, err := startMCPHTTP(t, config.Service{MCPTLSCert: p.cert, MCPTLSKey: p.key})
	if err != nil {
		t.Fatal(err)
	}
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.pool}}}
	if resp := postInitialize(t, trusting, "https://"+addr+"/mcp"); resp.StatusCode != http.StatusOK {
		t.Fatalf("over TLS with the CA trusted: status %d, want 200", resp.StatusCode)
	} else if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("TLS state %+v, want TLS 1.2 or later", resp.TLS)
	}

	untrusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool()}}}
	req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/mcp", strings.NewReader(initializeLine))
	var uae x509.UnknownAuthorityError
	if _, err := untrusting.Do(req); !errors.As(err, &uae) {
		t.Errorf("a client that does not trust the CA: err %v, want x509.UnknownAuthorityError", err)
	}

	req, _ = http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(initializeLine))
	req.Header.Set("Authorization", "Bearer the-token")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP to the TLS listener: status 200")
		}
	}
}

// A key file that another account may read or write, or that another
// account owns, stops MCP over HTTPS before it listens, as do a key that is
// not the certificate's and a directory; the error names no key bytes.
func TestServeMCPHTTPRefusesAnExposedTLSKey(t *testing.T) {
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o660, 0o602} {
		p := newTestPKI(t)
		if err := os.Chmod(p.key, mode); err != nil {
			t.Fatal(err)
		}
		_, err := startMCPHTTP(t, config.Service{MCPTLSCert: p.cert, MCPTLSKey: p.key})
		var ie *keys.InsecureError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "service.mcp_tls_key") {
			t.Errorf("key mode %04o: err %v, want a keys.InsecureError naming service.mcp_tls_key", mode, err)
		}
	}

	// A symbolic link is judged by the file it leads to: the link's own
	// mode (0777) is no matter, the key's is.
	p := newTestPKI(t)
	link := filepath.Join(filepath.Dir(p.key), "link.pem")
	if err := os.Symlink(p.key, link); err != nil {
		t.Fatal(err)
	}
	if _, err := startMCPHTTP(t, config.Service{MCPTLSCert: p.cert, MCPTLSKey: link}); err != nil {
		t.Errorf("a link to a key of mode 0600: %v", err)
	}
	if err := os.Chmod(p.key, 0o644); err != nil {
		t.Fatal(err)
	}
	var ie *keys.InsecureError
	if _, err := startMCPHTTP(t, config.Service{MCPTLSCert: p.cert, MCPTLSKey: link}); !errors.As(err, &ie) {
		t.Errorf("a link to a key of mode 0644: err %v, want a keys.InsecureError", err)
	}
	if err := os.Chmod(p.key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := startMCPHTTP(t, config.Service{MCPTLSCert: p.cert, MCPTLSKey: filepath.Dir(p.key)}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory as the key: err %v, want it refused", err)
	}

	other := newTestPKI(t)
	_, err := startMCPHTTP(t, config.Service{MCPTLSCert: p.cert, MCPTLSKey: other.key})
	if err == nil || !strings.Contains(err.Error(), "private key does not match public key") {
		t.Errorf("another certificate's key: err %v, want a mismatch", err)
	}
	keyPEM, _ := os.ReadFile(other.key)
	if err != nil && strings.Contains(err.Error(), strings.Split(string(keyPEM), "\n")[1]) {
		t.Error("the error quotes the key")
	}

	if os.Geteuid() != 0 {
		t.Log("not root: a key owned by another account is not tested")
		return
	}
	if err := os.Chown(p.key, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err = startMCPHTTP(t, config.Service{MCPTLSCert: p.cert, MCPTLSKey: p.key})
	if err == nil || !strings.Contains(err.Error(), "not owned by the service's account") {
		t.Errorf("a key owned by uid 65534: err %v, want it refused", err)
	}
}

// Over HTTPS only, a tokens file whose oauth.resource is http:// names a
// URI no client reaches: MCP is not served; https:// is.
func TestServeMCPHTTPSRefusesAnHTTPResource(t *testing.T) {
	p := newTestPKI(t)
	for _, c := range []struct {
		resource string
		ok       bool
	}{{"http://127.0.0.1:1/mcp", false}, {"https://127.0.0.1/mcp", true}} {
		tokens := filepath.Join(t.TempDir(), "tokens.toml")
		data := "[oauth]\nresource = \"" + c.resource + "\"\nissuers = [\"https://idp.example.test\"]\n\n[[oauth.principal]]\nsubject = \"a\"\nprincipal = \"agent\"\nscope = \"agent\"\n"
		if err := os.WriteFile(tokens, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := startMCPHTTP(t, config.Service{MCPTokens: tokens, MCPTLSCert: p.cert, MCPTLSKey: p.key})
		if c.ok && err != nil {
			t.Errorf("resource %s over HTTPS: %v", c.resource, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "oauth.resource")) {
			t.Errorf("resource %s over HTTPS: err %v, want it refused", c.resource, err)
		}
	}
}

// A renewal is served without a restart: at the first handshake after the
// files changed, the new pair is read, with the same checks; a renewed key
// others can read is not served, and the pair loaded before still is.
func TestServeMCPHTTPSServesARenewedCertificate(t *testing.T) {
	p := newTestPKI(t)
	addr, err := startMCPHTTP(t, config.Service{MCPTLSCert: p.cert, MCPTLSKey: p.key})
	if err != nil {
		t.Fatal(err)
	}
	serial := func() int64 {
		t.Helper()
		// A new connection each time: a handshake is what reads again.
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.pool}, DisableKeepAlives: true}}
		resp := postInitialize(t, c, "https://"+addr+"/mcp")
		if resp.StatusCode != http.StatusOK || resp.TLS == nil {
			t.Fatalf("over TLS: status %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if got := serial(); got != 2 {
		t.Fatalf("serial %d served at start, want 2", got)
	}
	p.issue(t, 3, p.cert, p.key)
	if got := serial(); got != 3 {
		t.Errorf("serial %d served after the renewal, want 3", got)
	}
	p.issue(t, 4, p.cert, p.key)
	if err := os.Chmod(p.key, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := serial(); got != 3 {
		t.Errorf("serial %d served after a renewal whose key others can read, want 3 (the pair loaded before)", got)
	}
	if err := os.Chmod(p.key, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serial(); got != 4 {
		t.Errorf("serial %d served once the renewed key is the service's alone, want 4", got)
	}
}
