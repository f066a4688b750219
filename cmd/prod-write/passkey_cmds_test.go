package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/prod-write/prod-write/pkg/passkeytest"
)

// cmdSoftAuthn is a software WebAuthn authenticator (pkg/passkeytest):
// it answers the creation options in OPTIONS, as a browser at ORIGIN
// would, with a fresh ES256 credential, and writes the registration
// response to RESPONSE:
//
//	softauthn register options.json response.json https://approve.example.test
func cmdSoftAuthn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 || args[0] != "register" {
		ts.Fatalf("usage: softauthn register OPTIONS RESPONSE ORIGIN")
	}
	a, err := passkeytest.New()
	ts.Check(err)
	resp, err := a.Register([]byte(ts.ReadFile(args[1])), passkeytest.Registration{Origin: args[3]})
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[2]), resp, 0o600))
}

// cmdPasteUnder adds the file SNIPPET to the trust policy TRUST right
// below PRINCIPAL's [[principal]] table, as root adds what passkey enroll
// finish printed; the file keeps its mode.
//
//	pasteunder snippet.toml trust.toml alice
func cmdPasteUnder(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: pasteunder SNIPPET TRUST PRINCIPAL")
	}
	src := ts.ReadFile(args[1])
	i := strings.Index(src, "id = \""+args[2]+"\"")
	if i < 0 {
		ts.Fatalf("no principal %s in %s", args[2], args[1])
	}
	end := len(src)
	if j := strings.Index(src[i:], "\n["); j >= 0 {
		end = i + j + 1
	}
	src = src[:end] + ts.ReadFile(args[0]) + "\n" + src[end:]
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(src), 0o644))
}

// cmdPageAuthn is a software authenticator kept in a file, that signs in
// to the approval page and decides there, over HTTP, as the page's
// script does in a browser at ORIGIN (the page is reached at BASE, the
// address a TLS proxy would forward to):
//
//	pageauthn new AUTH SNIPPET                 a credential, and its trust.toml table
//	pageauthn decide AUTH BASE ORIGIN FP VERDICT REASON
//
// decide prints each step's status and the decision's answer.
func cmdPageAuthn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: pageauthn new AUTH SNIPPET | decide AUTH BASE ORIGIN FP VERDICT REASON")
	}
	type stored struct {
		Key   []byte `json:"key"`
		ID    []byte `json:"id"`
		Count uint32 `json:"count"`
	}
	switch {
	case args[0] == "new" && len(args) == 3:
		a, err := passkeytest.New()
		ts.Check(err)
		k, err := x509.MarshalPKCS8PrivateKey(a.Key)
		ts.Check(err)
		b, err := json.Marshal(stored{Key: k, ID: a.ID})
		ts.Check(err)
		ts.Check(os.WriteFile(ts.MkAbs(args[1]), b, 0o600))
		cose, err := a.COSE()
		ts.Check(err)
		snippet := fmt.Sprintf("[[principal.passkey]]\nid = %q\npublic_key = \"cose:%s\"\nuser_verification = \"required\"\n", a.CredentialID(), base64.RawURLEncoding.EncodeToString(cose))
		ts.Check(os.WriteFile(ts.MkAbs(args[2]), []byte(snippet), 0o644))
	case args[0] == "decide" && len(args) == 7:
		var st stored
		ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[1])), &st))
		k, err := x509.ParsePKCS8PrivateKey(st.Key)
		ts.Check(err)
		a := &passkeytest.Authenticator{Key: k.(*ecdsa.PrivateKey), ID: st.ID, Count: st.Count}
		base, origin, fp := args[2], args[3], args[4]
		u, err := url.Parse(origin)
		ts.Check(err)
		cookie := ""
		post := func(path string, body any) (int, []byte) {
			b, err := json.Marshal(body)
			ts.Check(err)
			req, err := http.NewRequest("POST", base+path, bytes.NewReader(b))
			ts.Check(err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Origin", origin)
			if cookie != "" {
				req.Header.Set("Cookie", cookie)
			}
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
			ts.Check(err)
			defer resp.Body.Close()
			out, err := io.ReadAll(resp.Body)
			ts.Check(err)
			for _, c := range resp.Cookies() {
				cookie = c.Name + "=" + c.Value
			}
			fmt.Fprintf(ts.Stdout(), "%s: %d\n", path, resp.StatusCode)
			return resp.StatusCode, out
		}
		sign := func(options []byte) json.RawMessage {
			var o struct {
				PublicKey struct {
					Challenge string `json:"challenge"`
				} `json:"publicKey"`
			}
			ts.Check(json.Unmarshal(options, &o))
			ch, err := base64.RawURLEncoding.DecodeString(o.PublicKey.Challenge)
			ts.Check(err)
			cred, err := a.AssertJSON(ch, origin, u.Hostname())
			ts.Check(err)
			return cred
		}
		if code, out := post("/api/login/begin", struct{}{}); code == 200 {
			if code, _ := post("/api/login/finish", map[string]any{"credential": sign(out)}); code == 200 {
				if code, out := post("/api/challenge", map[string]string{"fingerprint": fp, "decision": args[5]}); code == 200 {
					_, out := post("/api/decide", map[string]any{"fingerprint": fp, "decision": args[5], "reason": args[6], "credential": sign(out)})
					fmt.Fprintf(ts.Stdout(), "%s\n", out)
				} else {
					fmt.Fprintf(ts.Stdout(), "%s\n", out)
				}
			}
		}
		b, err := json.Marshal(stored{Key: st.Key, ID: st.ID, Count: a.Count})
		ts.Check(err)
		ts.Check(os.WriteFile(ts.MkAbs(args[1]), b, 0o600))
	default:
		ts.Fatalf("usage: pageauthn new AUTH SNIPPET | decide AUTH BASE ORIGIN FP VERDICT REASON")
	}
}
