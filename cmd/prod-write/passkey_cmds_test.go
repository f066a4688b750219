package main

import (
	"os"
	"strings"

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
