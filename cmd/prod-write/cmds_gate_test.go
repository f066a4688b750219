package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/keys"
)

// Custom commands of the gate_*.txtar scripts.

// cmdAddPrincipal appends a principal to trust.toml in the working
// directory, with the public half of a key that keygen wrote:
//
//	exec prod-write keygen --out keys/pat.key
//	addprincipal pat agent,approver keys/pat.key [slack=UPAT] [github=pat] [github_id=N]
//
// github=LOGIN without github_id maps the numeric id fakegithub gives
// LOGIN (bridgetest.GitHubUserID).
//
// The file keeps its mode, so a policy init wrote stays loadable.
func cmdAddPrincipal(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: addprincipal ID ROLE[,ROLE…] KEYFILE [slack=ID] [github=LOGIN] [github_id=N]")
	}
	k, err := keys.Load(ts.MkAbs(args[2]))
	ts.Check(err)
	var b strings.Builder
	fmt.Fprintf(&b, "\n[[principal]]\nid = %q\nroles = [", args[0])
	for i, r := range strings.Split(args[1], ",") {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", r)
	}
	fmt.Fprintf(&b, "]\nkey = %q\n", k.Public().String())
	// github=LOGIN without github_id=N maps the id fakegithub gives LOGIN.
	var login string
	withID := false
	for _, kv := range args[3:] {
		name, value, ok := strings.Cut(kv, "=")
		switch {
		case ok && (name == "slack" || name == "github"):
			fmt.Fprintf(&b, "%s = %q\n", name, value)
			if name == "github" {
				login = value
			}
		case ok && name == "github_id":
			fmt.Fprintf(&b, "github_id = %s\n", value)
			withID = true
		default:
			ts.Fatalf("addprincipal: %q: want slack=ID, github=LOGIN or github_id=N", kv)
		}
	}
	if login != "" && !withID {
		fmt.Fprintf(&b, "github_id = %d\n", bridgetest.GitHubUserID(login))
	}
	f, err := os.OpenFile(ts.MkAbs("trust.toml"), os.O_WRONLY|os.O_APPEND, 0)
	ts.Check(err)
	_, err = f.WriteString(b.String())
	ts.Check(err)
	ts.Check(f.Close())
}

// cmdTamper edits the payload of one stored record, as someone who can
// write the store but holds no key would: it finds the one record under
// state/store/evidence whose decoded payload contains OLD, replaces OLD by
// NEW, and writes the envelope back, signature untouched, under its name.
//
//	tamper '"uses":1,' '"uses":9,'
func cmdTamper(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: tamper OLD NEW")
	}
	old, repl := []byte(args[0]), []byte(args[1])
	files, err := filepath.Glob(ts.MkAbs("state/store/evidence/*/*.json"))
	ts.Check(err)
	var found string
	var env map[string]any
	var payload []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		ts.Check(err)
		var e map[string]any
		ts.Check(json.Unmarshal(data, &e))
		p, _ := e["payload"].(string)
		body, err := base64.StdEncoding.DecodeString(p)
		ts.Check(err)
		if bytes.Contains(body, old) {
			if found != "" {
				ts.Fatalf("tamper: %q is in both %s and %s", old, found, f)
			}
			found, env, payload = f, e, body
		}
	}
	if found == "" {
		ts.Fatalf("tamper: no stored record contains %q", old)
	}
	if bytes.Count(payload, old) != 1 {
		ts.Fatalf("tamper: %q occurs %d times in %s", old, bytes.Count(payload, old), found)
	}
	env["payload"] = base64.StdEncoding.EncodeToString(bytes.Replace(payload, old, repl, 1))
	out, err := json.Marshal(env)
	ts.Check(err)
	ts.Check(os.WriteFile(found, append(out, '\n'), 0o600))
	ts.Logf("tampered with %s", found)
}
