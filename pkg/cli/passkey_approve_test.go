package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/passkeytest"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
)

// pageWorld is a deployment whose trust policy lists alice's passkey and
// an approval page's bridge ("page"), with a plan of config-push on
// staging (where passkeys are required) and smith's certainty record.
type pageWorld struct {
	h      *runHarness
	alice  *passkeytest.Authenticator
	bridge *keys.Private
	page   localapi.API // the page's server: a client of the API with the bridge key
	fp     string
	record string
}

func newPageWorld(t *testing.T) *pageWorld {
	t.Helper()
	return newPageWorldAt(t, testPageOrigin)
}

// newPageWorldAt is newPageWorld with the approval page at origin.
func newPageWorldAt(t *testing.T, origin string) *pageWorld {
	t.Helper()
	h := newRunHarness(t)
	addPasskeyTableAt(t, h, origin, `["staging"]`)
	a, err := passkeytest.NewFor("alice")
	if err != nil {
		t.Fatal(err)
	}
	pasteUnder(t, h, "alice", credentialSnippet(t, a))
	code, stdout, stderr := h.run("keygen", "--out", h.key("page"), "--json")
	var kg struct {
		PublicKey string `json:"public_key"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &kg) != nil {
		t.Fatalf("keygen: %d %s %s", code, stdout, stderr)
	}
	appendTrust(t, h, fmt.Sprintf("\n[[principal]]\nid = \"page\"\nroles = [\"bridge\"]\nkey = %q\n", kg.PublicKey))
	bk, err := keys.Load(h.key("page"))
	if err != nil {
		t.Fatal(err)
	}
	w := &pageWorld{h: h, alice: a, bridge: bk}
	w.page = localapi.API{Env: &w.factory("page").Env}
	w.fp, w.record = w.planAndFile(t, "web")
	return w
}

// factory is a Factory of h acting with principal's key ("": none).
func (w *pageWorld) factory(principal string) *Factory {
	h := w.h
	return &Factory{Env: localapi.Env{
		IO:  &IOStreams{In: strings.NewReader(""), Out: &strings.Builder{}, Err: &strings.Builder{}},
		Now: func() time.Time { return h.now },
		LookupEnv: func(k string) (string, bool) {
			if k == "PROD_WRITE_KEY" && principal != "" {
				return h.key(principal), true
			}
			v, ok := h.env[k]
			return v, ok
		},
		Getwd: func() (string, error) { return h.dir, nil },
	}}
}

// planAndFile plans config-push of service and has smith file a record.
func (w *pageWorld) planAndFile(t *testing.T, service string) (fp, record string) {
	t.Helper()
	h := w.h
	cfg := filepath.Join(h.dir, service+".toml")
	if err := os.WriteFile(cfg, []byte("a = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fp = h.plan("config-push", "--param", "service="+service, "--file", "config="+cfg)
	return fp, w.file(t, fp, "s")
}

func (w *pageWorld) file(t *testing.T, fp, summary string) string {
	t.Helper()
	code, stdout, stderr := w.h.run("file", fp, "--key", w.h.key("smith"), "--summary", summary, "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high", "--json")
	var rec struct {
		ID string `json:"id"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &rec) != nil || rec.ID == "" {
		t.Fatalf("file: %d %s %s", code, stdout, stderr)
	}
	return rec.ID
}

// credentialSnippet is a's [[principal.passkey]] table, as enrolment
// prints it.
func credentialSnippet(t *testing.T, a *passkeytest.Authenticator) string {
	t.Helper()
	cose, err := a.COSE()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("[[principal.passkey]]\nid = %q\npublic_key = \"cose:%s\"\nuser_verification = \"required\"\n", a.CredentialID(), base64.RawURLEncoding.EncodeToString(cose))
}

func appendTrust(t *testing.T, h *runHarness, s string) {
	t.Helper()
	tf, err := os.OpenFile(filepath.Join(h.dir, "trust.toml"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tf.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := tf.Close(); err != nil {
		t.Fatal(err)
	}
}

// decision is what the page's server makes of a statement the service
// issued and the assertion the approver's passkey made over it.
func decision(st *api.PasskeyChallengeResult, approver string) approval.PasskeyDecision {
	return approval.PasskeyDecision{Fingerprint: st.Fingerprint, Record: st.Record, Decision: st.Decision, Approver: approver,
		Reason: "looked at it", Nonce: st.Nonce, Issued: st.Issued, Expires: st.Expires}
}

// assert has a sign d's statement at origin (the RP ID its host) and k
// sign the decision.
func assertAndSign(t *testing.T, a *passkeytest.Authenticator, k *keys.Private, d approval.PasskeyDecision, origin string) *approval.Envelope {
	t.Helper()
	ch := approval.PasskeyChallenge(d.Statement())
	var err error
	if d.Assertion, err = a.Assert(ch[:], origin, strings.TrimPrefix(origin, "https://")); err != nil {
		t.Fatal(err)
	}
	env, err := approval.Sign(k, approval.TypePasskey, d)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func (w *pageWorld) challenge(t *testing.T, fp, verdict, record string) *api.PasskeyChallengeResult {
	t.Helper()
	st, err := w.page.PasskeyChallenge(context.Background(), api.PasskeyChallengeRequest{Fingerprint: fp, Decision: verdict, Record: record})
	if err != nil {
		t.Fatalf("passkey challenge: %v", err)
	}
	return st
}

// passkeyDecisions are the passkey decisions the store holds of fp.
func (w *pageWorld) passkeyDecisions(t *testing.T, fp string) []approval.PasskeyDecision {
	t.Helper()
	st, err := store.OpenDir(filepath.Join(w.h.dir, "state", "store"))
	if err != nil {
		t.Fatal(err)
	}
	ev, _, err := st.Evidence(fp)
	if err != nil {
		t.Fatal(err)
	}
	var out []approval.PasskeyDecision
	for _, env := range ev {
		if env.PayloadType != approval.TypePasskey {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil {
			t.Fatal(err)
		}
		var d approval.PasskeyDecision
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// evidence counts what the store holds of fp.
func (w *pageWorld) evidence(t *testing.T, fp string) int {
	t.Helper()
	st, err := store.OpenDir(filepath.Join(w.h.dir, "state", "store"))
	if err != nil {
		t.Fatal(err)
	}
	ev, _, err := st.Evidence(fp)
	if err != nil {
		t.Fatal(err)
	}
	return len(ev)
}

// The approval page's path end to end through the typed API: the page's
// server (the bridge key) has a statement issued, alice's passkey signs
// it, the page signs the decision and the service stores it; the gate
// then opens and the plan runs. The statement is the service's (its
// nonce, issued and expiry), the result names the credential and that
// the user was verified.
func TestPasskeyAttestedApprovalRuns(t *testing.T) {
	w := newPageWorld(t)
	ctx := context.Background()
	st := w.challenge(t, w.fp, approval.Approve, w.record)
	if st.Version != 2 || len(st.Nonce) != 32 || !st.Issued.Equal(w.h.now) || !st.Expires.Equal(w.h.now.Add(approval.DefaultAnswerTTL)) {
		t.Fatalf("statement issued: %+v", st)
	}
	d := decision(st, "alice")
	want := approval.PasskeyChallenge(d.Statement())
	if string(st.Challenge) != string(want[:]) {
		t.Fatal("the challenge returned is not the statement's")
	}
	env := assertAndSign(t, w.alice, w.bridge, decision(st, "alice"), testPageOrigin)
	r, err := w.page.PasskeyAttested(ctx, api.PasskeyAttestedRequest{Envelope: env})
	if err != nil {
		t.Fatalf("passkey attested: %v", err)
	}
	if r.Approver != "alice" || r.Decision != approval.Approve || r.Credential != w.alice.CredentialID() || !r.UserVerified {
		t.Fatalf("passkey attested: %+v", r)
	}
	w.h.env["DEPLOY_TOKEN"] = "t"
	if err := os.MkdirAll(filepath.Join(w.h.dir, "srv", "staging"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := w.h.run("run", w.fp); code != 0 {
		t.Fatalf("run approved on the page: %d %s", code, stderr)
	}
}

// What a caller handing over a passkey decision cannot make the service
// store: a nonce used twice, one it never issued, a statement for another
// plan, decision, record or time than its nonce's, an expired statement,
// an envelope not signed by a bridge, an assertion of a credential the
// policy does not list or made at another origin. Each is refused and
// nothing is stored; and only a bridge has statements issued.
func TestPasskeyAttestedRefused(t *testing.T) {
	w := newPageWorld(t)
	ctx := context.Background()
	h := w.h
	alice, err := keys.Load(h.key("alice"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := passkeytest.New()
	if err != nil {
		t.Fatal(err)
	}
	fp2, _ := w.planAndFile(t, "api")
	record2 := w.file(t, w.fp, "another record")
	refused := func(t *testing.T, env *approval.Envelope, code refusal.Code, says string) {
		t.Helper()
		before := w.evidence(t, w.fp) + w.evidence(t, fp2)
		_, err := w.page.PasskeyAttested(ctx, api.PasskeyAttestedRequest{Envelope: env})
		r, ok := refusal.As(err)
		if !ok || r.Code != code || !strings.Contains(r.Reason, says) {
			t.Fatalf("passkey attested: %v; want refused %s (%q)", err, code, says)
		}
		if after := w.evidence(t, w.fp) + w.evidence(t, fp2); after != before {
			t.Fatalf("a refused passkey decision was stored (%d records, %d before)", after, before)
		}
	}

	t.Run("a nonce used twice", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Approve, w.record)
		if _, err := w.page.PasskeyAttested(ctx, api.PasskeyAttestedRequest{Envelope: assertAndSign(t, w.alice, w.bridge, decision(st, "alice"), testPageOrigin)}); err != nil {
			t.Fatal(err)
		}
		// A second assertion over the same statement: a new record.
		d := decision(st, "alice")
		d.Reason = "again"
		refused(t, assertAndSign(t, w.alice, w.bridge, d, testPageOrigin), refusal.EvidenceConsumed, "used already")
	})
	t.Run("a nonce the service never issued", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Approve, w.record)
		d := decision(st, "alice")
		d.Nonce = make([]byte, 32)
		if _, err := rand.Read(d.Nonce); err != nil {
			t.Fatal(err)
		}
		refused(t, assertAndSign(t, w.alice, w.bridge, d, testPageOrigin), refusal.SignatureInvalid, "did not issue")
	})
	t.Run("another plan than the nonce's", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Deny, "")
		d := decision(st, "alice")
		d.Fingerprint = fp2
		refused(t, assertAndSign(t, w.alice, w.bridge, d, testPageOrigin), refusal.SignatureInvalid, "another plan")
	})
	t.Run("another decision than the nonce's", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Deny, w.record)
		d := decision(st, "alice")
		d.Decision = approval.Approve
		refused(t, assertAndSign(t, w.alice, w.bridge, d, testPageOrigin), refusal.SignatureInvalid, "another decision")
	})
	t.Run("another record than the nonce's", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Approve, w.record)
		d := decision(st, "alice")
		d.Record = record2
		refused(t, assertAndSign(t, w.alice, w.bridge, d, testPageOrigin), refusal.SignatureInvalid, "another certainty record")
	})
	t.Run("another expiry than the nonce's", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Approve, w.record)
		d := decision(st, "alice")
		d.Expires = d.Expires.Add(time.Minute)
		refused(t, assertAndSign(t, w.alice, w.bridge, d, testPageOrigin), refusal.SignatureInvalid, "another time")
	})
	t.Run("an expired statement", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Approve, w.record)
		env := assertAndSign(t, w.alice, w.bridge, decision(st, "alice"), testPageOrigin)
		start := h.now
		h.now = st.Expires
		defer func() { h.now = start }()
		refused(t, env, refusal.EvidenceExpired, "the passkey statement expired")
	})
	t.Run("an envelope not signed by a bridge", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Approve, w.record)
		refused(t, assertAndSign(t, w.alice, alice, decision(st, "alice"), testPageOrigin), refusal.RoleMissing, "bridge role")
	})
	t.Run("a credential not in trust.toml", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Approve, w.record)
		refused(t, assertAndSign(t, other, w.bridge, decision(st, "alice"), testPageOrigin), refusal.PrincipalUnknown, "not in the trust policy")
	})
	t.Run("a user handle of another principal", func(t *testing.T) {
		// alice's credential answering with bob's user handle: made for
		// bob, it would be filed under the wrong principal
		// (docs/adr/0043-passkey-assertions-as-evidence.md).
		st := w.challenge(t, w.fp, approval.Approve, w.record)
		own := w.alice.UserHandle
		w.alice.UserHandle = approval.PasskeyUserHandle("bob")
		defer func() { w.alice.UserHandle = own }()
		refused(t, assertAndSign(t, w.alice, w.bridge, decision(st, "alice"), testPageOrigin), refusal.SignatureInvalid, "enrolled for another principal")
	})
	t.Run("another origin", func(t *testing.T) {
		st := w.challenge(t, w.fp, approval.Approve, w.record)
		refused(t, assertAndSign(t, w.alice, w.bridge, decision(st, "alice"), "https://approve.evil.test"), refusal.SignatureInvalid, "origin")
	})
	t.Run("a statement issued to a caller that is not a bridge", func(t *testing.T) {
		_, err := localapi.API{Env: &w.factory("alice").Env}.PasskeyChallenge(ctx, api.PasskeyChallengeRequest{Fingerprint: w.fp, Decision: approval.Approve, Record: w.record})
		if !refusal.Is(err, refusal.RoleMissing) {
			t.Fatalf("passkey challenge with alice's key: %v; want refused role_missing", err)
		}
	})
}
