// Package approvalpage is the approval page
// (docs/adr/0048-approval-page.md): a bridge that shows an approver one
// plan, from the same bridge.View the Slack and GitHub bridges show, and
// has the approver's own passkey sign the decision.
//
// An approver logs in with a WebAuthn assertion over a random challenge
// of this server's, verified (go-webauthn) against the credentials of the
// trust policy; the session is a random cookie, kept here, bound to the
// principal and short-lived. Only an approver's session reads a plan. A
// decision is a second assertion, over the statement the runner service
// issued (API PasskeyChallenge); the server signs the
// approval.PasskeyDecision with its bridge key and hands it to the
// service (API PasskeyAttested), which checks it all again and stores it.
//
// Everything a visitor sends (cookies, JSON, assertions, headers) is a
// stranger's input: no JSON endpoint answers without a session, and the
// state-changing ones are POSTs of JSON from the page's own origin.
//
// The package knows no command line: it is handed its policy, source,
// API and key.
package approvalpage

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/visible"
)

//go:embed assets
var assets embed.FS

// CSP is the page's Content-Security-Policy: its own script, style and
// connections, nothing else, no framing, no forms.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// CookieName is the session cookie's (the __Host- prefix: Secure, Path=/,
// no Domain, so no other host sets it).
const CookieName = "__Host-prod-write-page"

// Limits.
const (
	// LoginTTL is how long a login challenge stands.
	LoginTTL = 2 * time.Minute
	// SessionTTL is how long a session lives from its login.
	SessionTTL = 15 * time.Minute
	// maxBody bounds a request body (an assertion is a few KiB).
	maxBody = 64 << 10
	// maxPending bounds the login challenges and sessions kept.
	maxPending = 10000
	// maxReason bounds a decision's reason.
	maxReason = 1000
	// maxBegun bounds the decisions one session has begun and not
	// finished (each is a statement the service keeps).
	maxBegun = 16
)

// API is what the page asks of the runner service: the statement a
// passkey signs, the storing of the decision, and the judging of an
// enrolment's registration.
type API interface {
	PasskeyChallenge(ctx context.Context, req api.PasskeyChallengeRequest) (*api.PasskeyChallengeResult, error)
	PasskeyAttested(ctx context.Context, req api.PasskeyAttestedRequest) (*api.PasskeyAttestedResult, error)
	PasskeyEnrollFinish(ctx context.Context, req api.PasskeyEnrollFinishRequest) (*api.PasskeyEnrollFinishResult, error)
}

// Config is what a Server is made of.
type Config struct {
	// Source is the bridge's: its policy (whose [passkey] origin is the
	// page's and whose credentials log in), registry, and where it reads
	// decisions.
	Source bridge.Source
	API    API
	// Key is the bridge's key, which signs the decisions it hands over.
	Key *keys.Private
	Now func() time.Time
	Log *slog.Logger
}

// Server is the approval page.
type Server struct {
	c Config
	// src is what the page judges by: c.Source, then what Reload gave.
	src    atomic.Pointer[bridge.Source]
	origin string
	rpID   string
	mux    *http.ServeMux

	mu       sync.Mutex
	logins   map[string]time.Time // login challenge (base64url) → expiry
	sessions map[string]*session  // sha256(session id) → session
	// counts is the highest sign count of each credential (base64url
	// id) in an assertion this page verified: at most one entry per
	// credential of the policy.
	counts map[string]uint32
}

type session struct {
	principal string
	approver  bool
	expires   time.Time
	// pending holds the statement the service issued for each decision
	// begun (fingerprint NUL decision): the page signs what it asked
	// for, never a statement the browser hands back.
	pending map[string]*api.PasskeyChallengeResult
}

// New returns the page of c.Source.Policy's [passkey] origin.
func New(c Config) (*Server, error) {
	p := c.Source.Policy
	if p == nil || p.Passkey == nil {
		return nil, errors.New("the approval page needs a trust policy with a [passkey] origin")
	}
	u, err := url.Parse(p.Passkey.Origin)
	if err != nil {
		return nil, fmt.Errorf("[passkey] origin: %w", err)
	}
	if c.Key == nil || c.API == nil {
		return nil, errors.New("the approval page needs the bridge's key and the service's API")
	}
	pr, ok := p.ByKey(c.Key.Public().ID())
	if !ok || !pr.Has(approval.RoleBridge) {
		return nil, refusal.New(refusal.RoleMissing, "the approval page's key is not of a principal with role bridge").Needs("[bridge] key: a key of a principal with role bridge")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{c: c, origin: p.Passkey.Origin, rpID: u.Hostname(), logins: map[string]time.Time{}, sessions: map[string]*session{}, counts: map[string]uint32{}}
	s.src.Store(&c.Source)
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.page)
	m.HandleFunc("GET /approve/{fp}", s.page)
	m.HandleFunc("GET /assets/{name}", s.asset)
	m.HandleFunc("POST /api/login/begin", s.post(s.loginBegin))
	m.HandleFunc("POST /api/login/finish", s.post(s.loginFinish))
	m.HandleFunc("POST /api/logout", s.post(s.logout))
	m.HandleFunc("GET /api/session", s.json(s.whoami))
	m.HandleFunc("GET /api/decision/{fp}", s.json(s.decision))
	m.HandleFunc("POST /api/challenge", s.post(s.challenge))
	m.HandleFunc("POST /api/decide", s.post(s.decide))
	m.HandleFunc("GET /enroll", s.page)
	m.HandleFunc("POST /api/enroll", s.post(s.enroll))
	s.mux = m
	return s, nil
}

// Origin is the page's origin; URL the address of one decision on it.
func (s *Server) Origin() string { return s.origin }

// Source is what the page judges by now.
func (s *Server) Source() bridge.Source { return *s.src.Load() }

// Reload has the page judge by src from now on: the runner service's
// SIGHUP, after it loaded a new trust policy and registry. So a passkey
// root pasted signs in, and one removed is revoked, without a restart;
// sessions stay, each judged by the new policy at its next call. A policy
// whose [passkey] origin is not the page's, or in which the page's key
// holds no role bridge, is refused, and the page keeps the source it had:
// its origin and RP ID are fixed at its start.
func (s *Server) Reload(src bridge.Source) error {
	p := src.Policy
	if p == nil || p.Passkey == nil || p.Passkey.Origin != s.origin {
		return fmt.Errorf("the approval page serves %s: restart it for another [passkey] origin", s.origin)
	}
	if pr, ok := p.ByKey(s.c.Key.Public().ID()); !ok || !pr.Has(approval.RoleBridge) {
		return refusal.New(refusal.RoleMissing, "the approval page's key is not of a principal with role bridge in the reloaded policy")
	}
	s.src.Store(&src)
	return nil
}

// URL is the page of the decision on the plan fp.
func URL(origin, fp string) string { return origin + "/approve/" + url.PathEscape(fp) }

// EnrollURL is the page that runs the enrolment whose WebAuthn creation
// options are options (api.PasskeyEnrollBeginResult): they travel in the
// fragment, base64url, which a browser never sends to a server, so the
// challenge is in no request line, log or Referer
// (docs/adr/0051-enrolment-on-the-approval-page.md).
func EnrollURL(origin string, options []byte) string {
	return origin + "/enroll#" + base64.RawURLEncoding.EncodeToString(options)
}

// ServeHTTP serves the page, every answer with the headers that keep it
// to itself: the CSP, no sniffing, no referrer, no caching, no framing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	s.mux.ServeHTTP(w, r)
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	b, err := assets.ReadFile("assets/index.html")
	if err != nil {
		http.Error(w, "no page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

var assetTypes = map[string]string{"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}

func (s *Server) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	typ, ok := assetTypes[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", typ)
	_, _ = w.Write(b)
}

// httpError is an answer other than 200: its status and what the page
// shows.
type httpError struct {
	status int
	msg    string
	code   string
}

func (e *httpError) Error() string { return e.msg }

func fail(status int, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

var errNoSession = fail(http.StatusUnauthorized, "sign in with your passkey")

type handler func(r *http.Request, body []byte) (any, error)

// json answers a GET with JSON.
func (s *Server) json(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.answer(w, r, h, nil) }
}

// post answers a state-changing call: a POST from the page's own origin
// with a JSON body (SameSite=Strict keeps the cookie off other sites'
// requests; this keeps their forms and scripts off the endpoints too).
func (s *Server) post(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != s.origin {
			s.write(w, fail(http.StatusForbidden, "the request does not come from the approval page's origin"), nil)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			s.write(w, fail(http.StatusUnsupportedMediaType, "the request's body must be application/json"), nil)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			s.write(w, fail(http.StatusRequestEntityTooLarge, "the request's body is too large"), nil)
			return
		}
		s.answer(w, r, h, body)
	}
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request, h handler, body []byte) {
	v, err := h(r, body)
	s.write(w, err, v)
}

func (s *Server) write(w http.ResponseWriter, err error, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		var he *httpError
		if !errors.As(err, &he) {
			if re, ok := refusal.As(err); ok {
				he = &httpError{status: http.StatusConflict, msg: re.Reason, code: string(re.Code)}
			} else {
				s.c.Log.Warn("approval page", "error", err)
				he = fail(http.StatusBadGateway, "the runner service could not be asked; try again")
			}
		}
		w.WriteHeader(he.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": he.msg, "code": he.code})
		return
	}
	if c, ok := v.(*cookieAnswer); ok {
		http.SetCookie(w, c.cookie)
		v = c.v
	}
	_ = json.NewEncoder(w).Encode(v)
}

// decode decodes body strictly into v.
func decode(body []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fail(http.StatusBadRequest, "the request's body is not what the page sends")
	}
	return nil
}

func random() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("randomness: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func sessionKey(id string) string {
	h := sha256.Sum256([]byte("prod-write approval page session v1\x00" + id))
	return hex.EncodeToString(h[:])
}

// sweep drops what has expired; s.mu is held.
func (s *Server) sweep(now time.Time) {
	for k, exp := range s.logins {
		if !now.Before(exp) {
			delete(s.logins, k)
		}
	}
	for k, se := range s.sessions {
		if !now.Before(se.expires) {
			delete(s.sessions, k)
		}
	}
}

// session is the live session the request's cookie names, or nil.
func (s *Server) session(r *http.Request) *session {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" || len(c.Value) > 100 {
		return nil
	}
	now := s.c.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.sessions[sessionKey(c.Value)]
	if se == nil || !now.Before(se.expires) {
		return nil
	}
	return se
}

// approver is the request's session when it is an approver's: 401
// without a session, 403 for another principal's.
func (s *Server) approver(r *http.Request) (*session, error) {
	se := s.session(r)
	if se == nil {
		return nil, errNoSession
	}
	if !se.approver {
		return nil, fail(http.StatusForbidden, "%s does not hold the approver role: the page shows plans to approvers only", se.principal)
	}
	return se, nil
}

// requestOptions is what navigator.credentials.get is handed.
type requestOptions struct {
	PublicKey struct {
		Challenge        string       `json:"challenge"`
		RPID             string       `json:"rpId"`
		Timeout          int64        `json:"timeout"`
		UserVerification string       `json:"userVerification"`
		AllowCredentials []descriptor `json:"allowCredentials"`
	} `json:"publicKey"`
}

type descriptor struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

func (s *Server) options(challenge string, ttl time.Duration, allow []descriptor) *requestOptions {
	var o requestOptions
	o.PublicKey.Challenge, o.PublicKey.RPID, o.PublicKey.Timeout = challenge, s.rpID, ttl.Milliseconds()
	o.PublicKey.UserVerification = "required"
	o.PublicKey.AllowCredentials = allow
	if o.PublicKey.AllowCredentials == nil {
		o.PublicKey.AllowCredentials = []descriptor{}
	}
	return &o
}

func (s *Server) loginBegin(r *http.Request, body []byte) (any, error) {
	var req struct{}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	ch, err := random()
	if err != nil {
		return nil, err
	}
	now := s.c.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	if len(s.logins) >= maxPending {
		return nil, fail(http.StatusServiceUnavailable, "too many sign-ins under way; try again in a minute")
	}
	s.logins[ch] = now.Add(LoginTTL)
	// Discoverable: the passkey says whose it is, and the policy decides.
	return s.options(ch, LoginTTL, nil), nil
}

// credentialOf is the credential of the policy with the raw id, and its
// principal.
func (s *Server) credentialOf(raw []byte) (*approval.PasskeyCredential, *approval.Principal, bool) {
	id := base64.RawURLEncoding.EncodeToString(raw)
	p := s.Source().Policy
	c, ok := p.Credential(id)
	if !ok {
		return nil, nil, false
	}
	for _, pr := range p.Principals {
		for i := range pr.Passkeys {
			if pr.Passkeys[i].ID == id {
				return c, pr, true
			}
		}
	}
	return nil, nil, false
}

// verify verifies an assertion (the JSON of the PublicKeyCredential
// navigator.credentials.get returned) over challenge with go-webauthn:
// client data type, challenge and origin, not cross-origin, the RP ID
// hash, UP, UV where the credential requires it, and the signature with
// the credential's key from the policy. It returns the parsed assertion
// and the credential's principal.
func (s *Server) verify(raw json.RawMessage, challenge string) (*protocol.ParsedCredentialAssertionData, *approval.Principal, error) {
	par, err := protocol.ParseCredentialRequestResponseBytes(raw)
	if err != nil {
		return nil, nil, fail(http.StatusUnauthorized, "the passkey's answer does not parse")
	}
	cred, pr, ok := s.credentialOf(par.RawID)
	if !ok {
		return nil, nil, fail(http.StatusUnauthorized, "this passkey is not enrolled in the trust policy")
	}
	cose, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(cred.PublicKey, "cose:"))
	if err != nil {
		return nil, nil, fmt.Errorf("the policy's key of a credential: %w", err)
	}
	if err := par.Verify(challenge, s.rpID, "", []string{s.origin}, nil, nil, protocol.TopOriginExplicitVerificationMode, false,
		cred.RequiresUV(), true, cose, protocol.SignaturePolicy{}); err != nil {
		return nil, nil, fail(http.StatusUnauthorized, "the passkey's answer does not verify")
	}
	return par, pr, nil
}

// signCount judges the sign count of an assertion of credential cred that
// verify verified (only a verified count is judged or kept: a forged
// one could otherwise raise a credential's count out of its owner's
// reach), made by principal's passkey. The count must move forward from
// the highest seen of the credential: in the assertions this page
// verified since it started, and, when the page reads the store itself,
// the count the store holds from the runs (store.SignCounts; a page that
// is a client of the service has no call for it). go-webauthn's
// Authenticator.UpdateCounter judges it as WebAuthn §7.2 step 17 says:
// a count not above the highest, unless both are 0 (an authenticator
// without a counter), is a CloneWarning, which the page refuses and logs
// as a possible clone of the passkey; the highest is then kept as it was.
// See docs/adr/0048-approval-page.md.
func (s *Server) signCount(principal, cred string, count uint32) error {
	var stored uint32
	if st := s.Source().Store; st != nil {
		m, err := st.SignCounts([]string{cred})
		if err != nil {
			return fmt.Errorf("reading sign counts: %w", err)
		}
		stored = m[cred]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := webauthn.Authenticator{SignCount: max(s.counts[cred], stored)}
	a.UpdateCounter(count)
	if a.CloneWarning {
		s.c.Log.Warn("approval page: refused a passkey whose sign count did not move forward, a possible clone",
			"principal", principal, "credential", cred, "sign_count", count, "highest_seen", a.SignCount)
		return fail(http.StatusUnauthorized, "the passkey's sign count did not move forward: the passkey may have been copied, so its answer is refused")
	}
	s.counts[cred] = a.SignCount
	return nil
}

func (s *Server) loginFinish(r *http.Request, body []byte) (any, error) {
	var req struct {
		Credential json.RawMessage `json:"credential"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	par, err := protocol.ParseCredentialRequestResponseBytes(req.Credential)
	if err != nil {
		return nil, fail(http.StatusUnauthorized, "the passkey's answer does not parse")
	}
	// The challenge is spent before anything else is judged: single use.
	ch := par.Response.CollectedClientData.Challenge
	now := s.c.Now()
	s.mu.Lock()
	exp, issued := s.logins[ch]
	delete(s.logins, ch)
	s.mu.Unlock()
	if !issued || !now.Before(exp) {
		return nil, fail(http.StatusUnauthorized, "the sign-in was not begun here or has expired; sign in again")
	}
	par, pr, err := s.verify(req.Credential, ch)
	if err != nil {
		return nil, err
	}
	if err := s.signCount(pr.ID, base64.RawURLEncoding.EncodeToString(par.RawID), par.Response.AuthenticatorData.Counter); err != nil {
		return nil, err
	}
	id, err := random()
	if err != nil {
		return nil, err
	}
	se := &session{principal: pr.ID, approver: pr.Has(approval.RoleApprover), expires: now.Add(SessionTTL), pending: map[string]*api.PasskeyChallengeResult{}}
	s.mu.Lock()
	s.sweep(now)
	if len(s.sessions) >= maxPending {
		s.mu.Unlock()
		return nil, fail(http.StatusServiceUnavailable, "too many sessions; try again later")
	}
	s.sessions[sessionKey(id)] = se
	s.mu.Unlock()
	s.c.Log.Info("approval page: signed in", "principal", pr.ID)
	return &cookieAnswer{cookie: &http.Cookie{Name: CookieName, Value: id, Path: "/", Expires: se.expires, MaxAge: int(SessionTTL.Seconds()),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode}, v: whoamiJSON{Principal: pr.ID, Approver: se.approver, Expires: se.expires}}, nil
}

// cookieAnswer is an answer that sets a cookie.
type cookieAnswer struct {
	cookie *http.Cookie
	v      any
}

func (s *Server) logout(r *http.Request, body []byte) (any, error) {
	if c, err := r.Cookie(CookieName); err == nil {
		s.mu.Lock()
		delete(s.sessions, sessionKey(c.Value))
		s.mu.Unlock()
	}
	return &cookieAnswer{cookie: &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode},
		v: struct{}{}}, nil
}

type whoamiJSON struct {
	Principal string    `json:"principal"`
	Approver  bool      `json:"approver"`
	Expires   time.Time `json:"expires"`
}

func (s *Server) whoami(r *http.Request, _ []byte) (any, error) {
	se := s.session(r)
	if se == nil {
		return nil, errNoSession
	}
	return whoamiJSON{Principal: se.principal, Approver: se.approver, Expires: se.expires}, nil
}

// judge is the view of the plan fp, on its newest certainty record that
// counts (or, lacking one, its newest).
func (s *Server) judge(fp string) (*bridge.Judgement, *bridge.View, error) {
	j, err := bridge.Judge(s.Source(), fp, s.c.Now().UTC())
	if err != nil {
		if r, ok := refusal.As(err); ok && r.Code == refusal.PlanAbsent {
			return nil, nil, fail(http.StatusNotFound, "no plan with this fingerprint is stored")
		}
		return nil, nil, err
	}
	var pick *approval.Assessed
	if j.Decision != nil {
		for _, a := range j.Decision.Evidence {
			if a.Kind != approval.KindRecord || a.Signed == nil {
				continue
			}
			if pick == nil || (a.Valid && !pick.Valid) || (a.Valid == pick.Valid && a.Issued.After(pick.Issued)) {
				pick = a
			}
		}
	}
	rec := ""
	if pick != nil {
		rec = pick.ID
	}
	return j, j.View(rec), nil
}

func (s *Server) decision(r *http.Request, _ []byte) (any, error) {
	if _, err := s.approver(r); err != nil {
		return nil, err
	}
	j, v, err := s.judge(r.PathValue("fp"))
	if err != nil {
		return nil, err
	}
	b, err := Shown(j, v)
	return json.RawMessage(b), err
}

type challengeRequest struct {
	Fingerprint string `json:"fingerprint"`
	Decision    string `json:"decision"`
}

func (s *Server) challenge(r *http.Request, body []byte) (any, error) {
	se, err := s.approver(r)
	if err != nil {
		return nil, err
	}
	var req challengeRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.Decision != approval.Approve && req.Decision != approval.Deny {
		return nil, fail(http.StatusBadRequest, "a decision is approve or deny")
	}
	_, v, err := s.judge(req.Fingerprint)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	begun := len(se.pending)
	s.mu.Unlock()
	if begun >= maxBegun {
		return nil, fail(http.StatusTooManyRequests, "too many decisions begun and not finished in this session; sign in again")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	st, err := s.c.API.PasskeyChallenge(ctx, api.PasskeyChallengeRequest{Fingerprint: v.Plan.Fingerprint, Decision: req.Decision, Record: v.RecordID})
	if err != nil {
		return nil, err
	}
	var allow []descriptor
	if pr, ok := s.Source().Policy.ByID(se.principal); ok {
		for _, c := range pr.Passkeys {
			allow = append(allow, descriptor{Type: "public-key", ID: c.ID})
		}
	}
	s.mu.Lock()
	se.pending[st.Fingerprint+"\x00"+st.Decision] = st
	s.mu.Unlock()
	return struct {
		*requestOptions
		Expires time.Time `json:"expires"`
	}{s.options(base64.RawURLEncoding.EncodeToString(st.Challenge), time.Until(st.Expires).Truncate(time.Second), allow), st.Expires}, nil
}

type decideRequest struct {
	Fingerprint string          `json:"fingerprint"`
	Decision    string          `json:"decision"`
	Reason      string          `json:"reason"`
	Credential  json.RawMessage `json:"credential"`
}

func (s *Server) decide(r *http.Request, body []byte) (any, error) {
	se, err := s.approver(r)
	if err != nil {
		return nil, err
	}
	var req decideRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if len(req.Reason) > maxReason {
		return nil, fail(http.StatusBadRequest, "a reason is at most %d bytes", maxReason)
	}
	key := req.Fingerprint + "\x00" + req.Decision
	s.mu.Lock()
	st := se.pending[key]
	delete(se.pending, key)
	s.mu.Unlock()
	if st == nil {
		return nil, fail(http.StatusConflict, "no %s of this plan was begun in this session; begin again", req.Decision)
	}
	par, pr, err := s.verify(req.Credential, base64.RawURLEncoding.EncodeToString(st.Challenge))
	if err != nil {
		return nil, err
	}
	if pr.ID != se.principal {
		return nil, fail(http.StatusForbidden, "the passkey is %s's, not that of the session's %s", pr.ID, se.principal)
	}
	// As at sign-in: the gate judges the count against the store's too,
	// but the page refuses before it signs anything.
	if err := s.signCount(se.principal, base64.RawURLEncoding.EncodeToString(par.RawID), par.Response.AuthenticatorData.Counter); err != nil {
		return nil, err
	}
	// The user handle goes along as the authenticator returned it: the
	// gate checks it names the principal the decision counts for (the
	// signature does not cover it; docs/adr/0043-passkey-assertions-as-evidence.md).
	raw := par.Raw.AssertionResponse
	d := approval.PasskeyDecision{Fingerprint: st.Fingerprint, Record: st.Record, Decision: st.Decision, Approver: se.principal,
		Reason: visible.Text(req.Reason), Nonce: st.Nonce, Issued: st.Issued, Expires: st.Expires,
		Assertion: approval.PasskeyAssertion{CredentialID: par.RawID, AuthenticatorData: raw.AuthenticatorData, ClientDataJSON: raw.ClientDataJSON, Signature: raw.Signature,
			UserHandle: raw.UserHandle}}
	env, err := approval.Sign(s.c.Key, approval.TypePasskey, d)
	if err != nil {
		return nil, fmt.Errorf("signing the decision: %w", err)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := s.c.API.PasskeyAttested(ctx, api.PasskeyAttestedRequest{Envelope: env})
	if err != nil {
		return nil, err
	}
	s.c.Log.Info("approval page: decision stored", "principal", se.principal, "decision", res.Decision, "fingerprint", res.Fingerprint, "id", res.ID)
	return res, nil
}

// enrollRequest is what the enrolment page sends: the registration
// navigator.credentials.create made from the options in its link.
type enrollRequest struct {
	Credential json.RawMessage `json:"credential"`
}

// enrolled is what the enrolment page shows: the snippet root adds.
type enrolled struct {
	Principal  string `json:"principal"`
	Credential string `json:"credential"`
	Snippet    string `json:"snippet"`
}

// enroll hands a registration to the runner service, which judges it
// against the enrolment it began (passkeyenroll.Enroller.Finish: a
// challenge it issued, once, at this origin and RP ID) and answers the
// trust.toml snippet. It needs no session: whoever enrols has no passkey
// yet, and the challenge in the link is the enrolment's one capability.
// Nothing is written to the policy; root adds the snippet.
func (s *Server) enroll(r *http.Request, body []byte) (any, error) {
	var req enrollRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if !json.Valid(req.Credential) || len(req.Credential) == 0 || req.Credential[0] != '{' {
		return nil, fail(http.StatusBadRequest, "the request's body is not what the page sends")
	}
	res, err := s.c.API.PasskeyEnrollFinish(r.Context(), api.PasskeyEnrollFinishRequest{Response: req.Credential})
	if err != nil {
		return nil, err
	}
	s.c.Log.Info("approval page: passkey enrolled", "principal", res.Principal, "credential", res.Credential, "authorised", res.Authorised)
	return &enrolled{Principal: res.Principal, Credential: res.Credential, Snippet: res.Snippet}, nil
}
