package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/passkeytest"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
)

const testPageOrigin = "https://approve.example.test"

// addPasskeyTable gives h's trust policy the approval page's origin, with
// passkeys required on targets.
func addPasskeyTable(t *testing.T, h *runHarness, targets string) {
	t.Helper()
	addPasskeyTableAt(t, h, testPageOrigin, targets)
}

// addPasskeyTableAt is addPasskeyTable with the page at origin.
func addPasskeyTableAt(t *testing.T, h *runHarness, origin, targets string) {
	t.Helper()
	tf, err := os.OpenFile(filepath.Join(h.dir, "trust.toml"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tf.WriteString("\n[passkey]\norigin = \"" + origin + "\"\nrequired_targets = " + targets + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := tf.Close(); err != nil {
		t.Fatal(err)
	}
}

// pasteUnder adds snippet to h's trust.toml right below principal's
// [[principal]] table, as root does.
func pasteUnder(t *testing.T, h *runHarness, principal, snippet string) {
	t.Helper()
	path := filepath.Join(h.dir, "trust.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	i := strings.Index(src, "id = \""+principal+"\"")
	if i < 0 {
		t.Fatalf("no principal %s in trust.toml", principal)
	}
	j := strings.Index(src[i:], "[[principal]]")
	if j < 0 {
		t.Fatal("want another principal after " + principal)
	}
	src = src[:i+j] + snippet + "\n" + src[i+j:]
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// enrollWithCode enrols a credential of a for principal through the
// command line, authorised by a one-time code, and returns what finish
// printed on stdout (the snippet) and every output besides the code's own.
func enrollWithCode(t *testing.T, h *runHarness, a *passkeytest.Authenticator, principal string) (snippet, others string) {
	t.Helper()
	code, stdout, stderr := h.run("passkey", "code", principal)
	if code != 0 {
		t.Fatalf("passkey code: %d %s", code, stderr)
	}
	secret := strings.TrimSpace(stdout)
	others += stderr
	codeFile := filepath.Join(h.dir, "code.txt")
	if err := os.WriteFile(codeFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = h.run("passkey", "enroll", "begin", "--code-file", codeFile)
	if code != 0 {
		t.Fatalf("passkey enroll begin: %d %s", code, stderr)
	}
	others += stdout + stderr
	resp, err := a.Register([]byte(stdout), passkeytest.Registration{Origin: testPageOrigin})
	if err != nil {
		t.Fatal(err)
	}
	respFile := filepath.Join(h.dir, "response.json")
	if err := os.WriteFile(respFile, resp, 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = h.run("passkey", "enroll", "finish", respFile)
	if code != 0 {
		t.Fatalf("passkey enroll finish: %d %s", code, stderr)
	}
	others += stdout + stderr
	// The code enrols once.
	code, _, stderr = h.run("passkey", "enroll", "begin", "--code-file", codeFile, "--json")
	if code != ExitRefused || !strings.Contains(stderr, `"code":"evidence_consumed"`) {
		t.Fatalf("passkey enroll begin with the code again: exit %d %s; want refused evidence_consumed", code, stderr)
	}
	others += stderr
	if strings.Contains(others, secret) {
		t.Fatalf("the one-time code is printed somewhere besides passkey code's stdout:\n%s", others)
	}
	return stdout, others
}

// End to end: alice's passkey, enrolled with a one-time code through the
// command line, counts for nothing until root pastes the snippet finish
// printed under alice in trust.toml; then an assertion of that credential
// approving a plan verifies in the gate (status allowed, passkey-signed,
// user verified) and the plan runs.
func TestPasskeyEnrollSnippetVerifiesInTheGate(t *testing.T) {
	h := newRunHarness(t)
	addPasskeyTable(t, h, `["staging"]`)
	a, err := passkeytest.New()
	if err != nil {
		t.Fatal(err)
	}
	snippet, _ := enrollWithCode(t, h, a, "alice")
	if !strings.Contains(snippet, "[[principal.passkey]]\nid = \""+a.CredentialID()+"\"\n") {
		t.Fatalf("the snippet does not name the credential:\n%s", snippet)
	}

	// A plan, smith's certainty record, and alice's passkey approval.
	cfg := filepath.Join(h.dir, "app.toml")
	if err := os.WriteFile(cfg, []byte("a = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fp := h.plan("config-push", "--param", "service=web", "--file", "config="+cfg)
	code, stdout, stderr := h.run("file", fp, "--key", h.key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high", "--json")
	var rec struct {
		ID string `json:"id"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &rec) != nil || rec.ID == "" {
		t.Fatalf("file: %d %s %s", code, stdout, stderr)
	}
	alice, err := keys.Load(h.key("alice"))
	if err != nil {
		t.Fatal(err)
	}
	d := approval.PasskeyDecision{Fingerprint: fp, Record: rec.ID, Decision: approval.Approve, Approver: "alice", Nonce: []byte("service nonce"),
		Issued: h.now.Add(-time.Second), Expires: h.now.Add(time.Hour)}
	ch := approval.PasskeyChallenge(d.Statement())
	if d.Assertion, err = a.Assert(ch[:], testPageOrigin, "approve.example.test"); err != nil {
		t.Fatal(err)
	}
	env, err := approval.Sign(alice, approval.TypePasskey, d)
	if err != nil {
		t.Fatal(err)
	}
	id, err := approval.ID(env)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenDir(filepath.Join(h.dir, "state", "store"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutEvidence(fp, id, env); err != nil {
		t.Fatal(err)
	}

	status := func() (allowed bool, evidence string) {
		t.Helper()
		_, stdout, _ := h.run("status", fp, "--json")
		var s struct {
			Allowed  bool              `json:"allowed"`
			Evidence []json.RawMessage `json:"evidence"`
		}
		if err := json.Unmarshal([]byte(stdout), &s); err != nil {
			t.Fatalf("status --json: %v: %s", err, stdout)
		}
		var all []string
		for _, e := range s.Evidence {
			var c bytes.Buffer
			if err := json.Compact(&c, e); err != nil {
				t.Fatal(err)
			}
			all = append(all, c.String())
		}
		return s.Allowed, strings.Join(all, "\n")
	}
	if ok, ev := status(); ok || !strings.Contains(ev, "is not in the trust policy") {
		t.Fatalf("before root pastes the snippet: allowed %v, evidence %s; want the credential unknown", ok, ev)
	}
	pasteUnder(t, h, "alice", snippet)
	ok, ev := status()
	if !ok || !strings.Contains(ev, `"credential":"`+a.CredentialID()+`"`) || !strings.Contains(ev, `"user_verified":true`) {
		t.Fatalf("with the snippet pasted under alice: allowed %v, evidence %s; want allowed by her passkey", ok, ev)
	}
	h.env["DEPLOY_TOKEN"] = "t"
	if err := os.MkdirAll(filepath.Join(h.dir, "srv", "staging"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := h.run("run", fp); code != 0 {
		t.Fatalf("run approved by the enrolled passkey: %d %s", code, stderr)
	}
	// What the receipt says of it: the approval came through alice's
	// passkey, not "the CLI" (whose key signed no answer here); the run
	// exports as an attestation naming that channel, and replays.
	if code, stdout, stderr := h.run("receipts", "show", "1"); code != 0 || !strings.Contains(stdout, "approvals by alice via passkey") {
		t.Errorf("receipts show of the passkey-approved run: %d %s %s; want it to say alice approved via passkey", code, stdout, stderr)
	}
	code, stdout, stderr = h.run("receipts", "export", "--in-toto")
	if code != 0 {
		t.Fatalf("export of a passkey-approved run: %d %s", code, stderr)
	}
	var exported dsse.Envelope
	if err := json.Unmarshal([]byte(stdout), &exported); err != nil {
		t.Fatal(err)
	}
	body, _ := base64.StdEncoding.DecodeString(exported.Payload)
	if !strings.Contains(string(body), `{"principal":"alice","kind":"answer","channel":"passkey","record":"`) {
		t.Errorf("the attestation's approvers do not name alice's passkey: %s", body)
	}
	if code, stdout, stderr := h.run("replay"); code != 0 {
		t.Errorf("replay of a passkey-approved run: %d %s %s", code, stdout, stderr)
	}
}

// What a caller of the service who is not its operator (nobody, with no
// key) cannot make it do with the enrolment calls: issue a code, begin an
// enrolment without a code, or begin one with a made-up code; the service
// stores nothing for it. With a code an operator issued it may begin
// (the code is the authority), once.
func TestPasskeyEnrollThroughTheServiceByAStranger(t *testing.T) {
	w := newAPIWorld(t)
	ctx := context.Background()
	stranger := localapi.ServiceClient{Env: &w.keyless.Env}
	_, err := asNobody(t, func() (*api.PasskeyCodeResult, error) {
		return stranger.PasskeyCode(ctx, api.PasskeyCodeRequest{Principal: "alice"})
	})
	if !refusal.Is(err, refusal.RoleMissing) {
		t.Fatalf("passkey code by nobody: %v; want refused role_missing", err)
	}
	_, err = asNobody(t, func() (*api.PasskeyEnrollBeginResult, error) {
		return stranger.PasskeyEnrollBegin(ctx, api.PasskeyEnrollBeginRequest{})
	})
	if err == nil {
		t.Fatal("passkey enroll begin by nobody with no key and no code began")
	}
	_, err = asNobody(t, func() (*api.PasskeyEnrollBeginResult, error) {
		return stranger.PasskeyEnrollBegin(ctx, api.PasskeyEnrollBeginRequest{Code: strings.Repeat("A", 32)})
	})
	if !refusal.Is(err, refusal.SignatureInvalid) {
		t.Fatalf("passkey enroll begin by nobody with a made-up code: %v; want refused signature_invalid", err)
	}
	dir := filepath.Join(w.h.dir, "state", "passkey-enrol")
	if ents, _ := os.ReadDir(filepath.Join(dir, "sessions")); len(ents) != 0 {
		t.Fatalf("the service stored %d sessions for a stranger", len(ents))
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "codes")); len(ents) != 0 {
		t.Fatalf("the service stored %d codes for a stranger", len(ents))
	}

	c, err := localapi.API{Env: &w.local.Env}.PasskeyCode(ctx, api.PasskeyCodeRequest{Principal: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := asNobody(t, func() (*api.PasskeyEnrollBeginResult, error) {
		return stranger.PasskeyEnrollBegin(ctx, api.PasskeyEnrollBeginRequest{Code: c.Code})
	})
	if err != nil || b.Principal != "alice" || b.Authorised != "code" {
		t.Fatalf("passkey enroll begin by nobody with alice's code: %+v, %v", b, err)
	}
	if strings.Contains(string(b.Options), c.Code) {
		t.Fatal("the options quote the code")
	}
}
