package approvalpage_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/passkeyapprove"
	"github.com/prod-write/prod-write/pkg/passkeyenroll"
	"github.com/prod-write/prod-write/pkg/passkeytest"
)

const (
	origin = "https://approve.example.test"
	rpID   = "approve.example.test"
)

// page is the approval page of bridgetest's world, whose policy has a
// [passkey] table and an approver, pat, with an enrolled passkey; its API
// is the service's passkey issuer, in process.
type page struct {
	w   *bridgetest.World
	pat *passkeytest.Authenticator
	srv *approvalpage.Server
	api *issuerAPI
	log *syncBuffer
}

func newPage(t *testing.T, src func(bridge.Source) bridge.Source) *page {
	t.Helper()
	w, pat := bridgetest.NewWithPasskey(t, origin)
	var err error
	s := w.Source()
	if src != nil {
		s = src(s)
	}
	p := &page{w: w, pat: pat, log: &syncBuffer{}}
	p.api = &issuerAPI{src: w.Source(), iss: &passkeyapprove.Issuer{Dir: filepath.Join(w.Dir, "state", "passkey-approve"), Now: time.Now},
		enr: &passkeyenroll.Enroller{Dir: filepath.Join(w.Dir, "state", "passkey-enrol"), Policy: w.Policy, Now: time.Now}}
	if p.srv, err = approvalpage.New(approvalpage.Config{Source: s, API: p.api, Key: bridgetest.Key("bridge"), Now: time.Now,
		Log: slog.New(slog.NewTextHandler(p.log, nil))}); err != nil {
		t.Fatal(err)
	}
	return p
}

// issuerAPI is the service's side of the page's calls, in process.
type issuerAPI struct {
	src      bridge.Source
	iss      *passkeyapprove.Issuer
	enr      *passkeyenroll.Enroller
	mu       sync.Mutex
	attested int
	finished int
}

func (a *issuerAPI) PasskeyEnrollFinish(_ context.Context, req api.PasskeyEnrollFinishRequest) (*api.PasskeyEnrollFinishResult, error) {
	a.mu.Lock()
	a.finished++
	a.mu.Unlock()
	en, err := a.enr.Finish(req.Response)
	if err != nil {
		return nil, err
	}
	return &api.PasskeyEnrollFinishResult{Principal: en.Principal, Authorised: en.Authorised, Credential: en.CredentialID, PublicKey: en.PublicKey, Snippet: en.Snippet()}, nil
}

func (a *issuerAPI) PasskeyChallenge(_ context.Context, req api.PasskeyChallengeRequest) (*api.PasskeyChallengeResult, error) {
	st, err := a.iss.Challenge(a.src, req.Fingerprint, req.Decision, req.Record)
	if err != nil {
		return nil, err
	}
	return &api.PasskeyChallengeResult{Fingerprint: st.Fingerprint, Decision: st.Decision, Record: st.Record, Version: st.Version,
		Nonce: st.Nonce, Issued: st.Issued, Expires: st.Expires, Challenge: st.Challenge[:]}, nil
}

func (a *issuerAPI) PasskeyAttested(_ context.Context, req api.PasskeyAttestedRequest) (*api.PasskeyAttestedResult, error) {
	a.mu.Lock()
	a.attested++
	a.mu.Unlock()
	r, err := a.iss.Admit(a.src, req.Envelope, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	return &api.PasskeyAttestedResult{ID: r.ID, Fingerprint: r.Fingerprint, Approver: r.Approver, Decision: r.Decision, Credential: r.Credential, UserVerified: r.UserVerified}, nil
}

func (a *issuerAPI) calls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attested
}

// syncBuffer is a log's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// post sends a POST of body from the page's origin, with the session
// cookie when one is given.
func (p *page) post(t *testing.T, path, cookie string, body any) *httptest.ResponseRecorder {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", origin+path, bytes.NewReader(b))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Origin", origin)
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: approvalpage.CookieName, Value: cookie})
	}
	rec := httptest.NewRecorder()
	p.srv.ServeHTTP(rec, r)
	return rec
}

// challengeOf is the challenge of a navigator.credentials.get options
// answer.
func challengeOf(t *testing.T, rec *httptest.ResponseRecorder) []byte {
	t.Helper()
	var o struct {
		PublicKey struct {
			Challenge string `json:"challenge"`
		} `json:"publicKey"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &o) != nil {
		t.Fatalf("options: %d %s", rec.Code, rec.Body)
	}
	ch, err := base64.RawURLEncoding.DecodeString(o.PublicKey.Challenge)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// signIn signs in with a (pat's passkey, or a copy of it) and returns the
// answer; tamper, when set, changes the credential's JSON first.
func (p *page) signIn(t *testing.T, a *passkeytest.Authenticator, tamper func(map[string]any)) *httptest.ResponseRecorder {
	t.Helper()
	ch := challengeOf(t, p.post(t, "/api/login/begin", "", struct{}{}))
	cred, err := a.AssertJSON(ch, origin, rpID)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(cred, &m); err != nil {
		t.Fatal(err)
	}
	if tamper != nil {
		tamper(m)
	}
	return p.post(t, "/api/login/finish", "", map[string]any{"credential": m})
}

func cookieOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	for _, c := range rec.Result().Cookies() {
		if c.Name == approvalpage.CookieName {
			return c.Value
		}
	}
	t.Fatalf("no session cookie: %d %s", rec.Code, rec.Body)
	return ""
}

// copyOf is a clone of a: its key and credential id, and a counter of its
// own that says count (the next assertion says count+1).
func copyOf(a *passkeytest.Authenticator, count uint32) *passkeytest.Authenticator {
	return &passkeytest.Authenticator{Key: a.Key, ID: a.ID, Count: count}
}

// withoutCounter is an authenticator whose next assertion says sign
// count 0, as one without a counter always does (Assert adds one first).
const withoutCounter = math.MaxUint32

// A sign-in whose sign count does not move forward from the highest seen
// of its credential (by this page, or held by the store from the runs)
// is refused and logged as a possible clone; an authenticator without a
// counter (always 0) signs in; an assertion that does not verify raises
// no count.
func TestSignInSignCount(t *testing.T) {
	type step struct {
		count  uint32 // what the assertion's counter said last (it says one more)
		tamper bool   // the signature broken
		want   int
	}
	for _, row := range []struct {
		name string
		// stored is the store's count of the credential, as a run
		// advances it (0: none).
		stored uint32
		steps  []step
		clone  bool // the log warns of a possible clone
	}{
		{name: "counts moving forward", steps: []step{{count: 0, want: 200}, {count: 1, want: 200}, {count: 41, want: 200}}},
		{name: "the same count again", steps: []step{{count: 4, want: 200}, {count: 4, want: 401}}, clone: true},
		{name: "a lower count", steps: []step{{count: 9, want: 200}, {count: 3, want: 401}}, clone: true},
		{name: "zero after a count", steps: []step{{count: 9, want: 200}, {count: withoutCounter, want: 401}}, clone: true},
		{name: "an authenticator without a counter", steps: []step{{count: withoutCounter, want: 200}, {count: withoutCounter, want: 200}}},
		{name: "not above the store's count", stored: 50, steps: []step{{count: 49, want: 401}, {count: 50, want: 200}}, clone: true},
		{name: "a forged high count raises nothing", steps: []step{{count: 1000, tamper: true, want: 401}, {count: 1, want: 200}}},
	} {
		t.Run(row.name, func(t *testing.T) {
			p := newPage(t, nil)
			cred := p.pat.CredentialID()
			if row.stored != 0 {
				if err := p.w.Store.AdvanceSignCount(cred, row.stored, strings.Repeat("1", 32)); err != nil {
					t.Fatal(err)
				}
			}
			for i, s := range row.steps {
				var tamper func(map[string]any)
				if s.tamper {
					tamper = func(m map[string]any) {
						m["response"].(map[string]any)["signature"] = base64.RawURLEncoding.EncodeToString([]byte("not a signature"))
					}
				}
				rec := p.signIn(t, copyOf(p.pat, s.count), tamper)
				if rec.Code != s.want {
					t.Fatalf("sign-in %d (count %d): %d %s; want %d", i+1, s.count+1, rec.Code, rec.Body, s.want)
				}
				if s.want == 401 && !s.tamper && !strings.Contains(rec.Body.String(), "sign count did not move forward") {
					t.Fatalf("sign-in %d refused for another reason: %s", i+1, rec.Body)
				}
				if s.want == 200 {
					cookieOf(t, rec)
				}
			}
			log := p.log.String()
			if clone := strings.Contains(log, "possible clone"); clone != row.clone {
				t.Fatalf("the log warns of a clone: %v, want %v:\n%s", clone, row.clone, log)
			}
			if row.clone && !strings.Contains(log, "principal=pat") {
				t.Fatalf("the clone's warning does not name the principal:\n%s", log)
			}
		})
	}
	t.Run("the store's count is read at each sign-in", func(t *testing.T) {
		p := newPage(t, nil)
		if rec := p.signIn(t, copyOf(p.pat, 5), nil); rec.Code != 200 {
			t.Fatalf("sign-in: %d %s", rec.Code, rec.Body)
		}
		// A run consumed a decision made at 20 since.
		if err := p.w.Store.AdvanceSignCount(p.pat.CredentialID(), 20, strings.Repeat("2", 32)); err != nil {
			t.Fatal(err)
		}
		if rec := p.signIn(t, copyOf(p.pat, 10), nil); rec.Code != 401 {
			t.Fatalf("a sign-in below the store's count: %d %s; want 401", rec.Code, rec.Body)
		}
	})
	t.Run("a page that is a client of the service judges by what it saw", func(t *testing.T) {
		// No store: the page reads through the service, which has no
		// call for sign counts.
		p := newPage(t, func(s bridge.Source) bridge.Source {
			s.Read = func(fp string) (*bridge.Input, error) { return bridge.Gather(s, fp) }
			s.Store = nil
			return s
		})
		if rec := p.signIn(t, copyOf(p.pat, 5), nil); rec.Code != 200 {
			t.Fatalf("sign-in: %d %s", rec.Code, rec.Body)
		}
		if rec := p.signIn(t, copyOf(p.pat, 5), nil); rec.Code != 401 {
			t.Fatalf("the same count again: %d %s; want 401", rec.Code, rec.Body)
		}
	})
}

// A decision whose assertion's sign count does not move forward from the
// sign-in's is refused by the page before it signs or sends anything; one
// that moves forward is stored.
func TestDecideSignCount(t *testing.T) {
	for _, row := range []struct {
		name  string
		count uint32 // the decision's assertion says one more
		want  int
	}{
		{"below the sign-in's", 3, http.StatusUnauthorized},
		{"the sign-in's", 9, http.StatusUnauthorized},
		{"above the sign-in's", 10, http.StatusOK},
	} {
		t.Run(row.name, func(t *testing.T) {
			p := newPage(t, nil)
			cookie := cookieOf(t, p.signIn(t, copyOf(p.pat, 9), nil)) // signs 10
			ch := challengeOf(t, p.post(t, "/api/challenge", cookie, map[string]string{"fingerprint": p.w.FP, "decision": "approve"}))
			cred, err := copyOf(p.pat, row.count).AssertJSON(ch, origin, rpID)
			if err != nil {
				t.Fatal(err)
			}
			rec := p.post(t, "/api/decide", cookie, map[string]any{"fingerprint": p.w.FP, "decision": "approve", "reason": "read it", "credential": json.RawMessage(cred)})
			if rec.Code != row.want {
				t.Fatalf("decide at count %d after a sign-in at 10: %d %s; want %d", row.count+1, rec.Code, rec.Body, row.want)
			}
			if sent := p.api.calls(); (sent == 1) != (row.want == http.StatusOK) {
				t.Fatalf("the page sent %d decisions", sent)
			}
			if row.want != http.StatusOK && !strings.Contains(p.log.String(), "possible clone") {
				t.Fatalf("no clone warning:\n%s", p.log)
			}
		})
	}
}

// A sign-in challenge answers once, whatever the sign count says: an
// assertion of an authenticator without a counter (0, which the sign
// count check lets through every time) sent twice is refused the second
// time as not begun here, and so is a fresh assertion over the spent
// challenge.
func TestSignInChallengeAnswersOnce(t *testing.T) {
	p := newPage(t, nil)
	a := copyOf(p.pat, withoutCounter)
	ch := challengeOf(t, p.post(t, "/api/login/begin", "", struct{}{}))
	cred, err := a.AssertJSON(ch, origin, rpID)
	if err != nil {
		t.Fatal(err)
	}
	if rec := p.post(t, "/api/login/finish", "", map[string]any{"credential": json.RawMessage(cred)}); rec.Code != http.StatusOK {
		t.Fatalf("first sign-in: %d %s", rec.Code, rec.Body)
	}
	a.Count = withoutCounter
	again, err := a.AssertJSON(ch, origin, rpID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]byte{cred, again} {
		rec := p.post(t, "/api/login/finish", "", map[string]any{"credential": json.RawMessage(c)})
		if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "not begun here") {
			t.Fatalf("a sign-in over a spent challenge: %d %s; want 401, not begun here", rec.Code, rec.Body)
		}
	}
}
