package mcpserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/time/rate"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// sessionIdle closes a session after this long without a request, so that
// clients that vanish without ending their session do not hold its memory
// for the life of the service.
const sessionIdle = 30 * time.Minute

// NewHTTPHandler serves MCP over Streamable HTTP for the runner service
// (docs/DESIGN.md §12, §13). Every request must carry `Authorization: Bearer TOKEN`
// for a token of tokens; any other request gets 401 with
// `WWW-Authenticate: Bearer` and no word on what was wrong. A token's server
// is built on its first request, by the code path of [New], for the
// backend backendFor returns, in the token's scope narrowed by o (see
// [Scope.Within]); it is then kept for the life of the handler, so, as
// over stdio, its tool list is fixed while its roles are checked again at
// every call. The backend must act for the token's principal: if it acts
// for another, the token is not served.
//
// Each token has its own Streamable HTTP handler, so a session started
// with one token is unknown to every other: a session id alone reaches
// nothing. The bearer is dropped from the request once it has been
// resolved; it is never logged, returned or handed to the SDK or a
// backend.
//
// With o.Calls (the runner service's), a stop treats MCP over HTTP as the
// socket (docs/adr/0031-waits-through-the-service.md): each call joins
// Calls, so that the stop waits, without a time limit, for its handler (a
// run to its outcome receipt, its client there or not), and a
// wait_for_decision ends at once, pending; a request that comes once the
// service stops is refused (503). [HTTPHandler.Drain] then waits a while
// for the last answers to be written, and [HTTPHandler.Close] ends the
// sessions.
func NewHTTPHandler(tokens *Tokens, backendFor func(Token) (Backend, error), o Options) *HTTPHandler {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &HTTPHandler{tokens: tokens, backendFor: backendFor, o: o, log: log, servers: map[[32]byte]*tokenServer{}, limiters: map[string]*rate.Limiter{}}
	if h.o.Rate == 0 {
		h.o.Rate = DefaultRate
	}
	if h.o.Burst == 0 {
		h.o.Burst = DefaultBurst
	}
	if oa := tokens.OAuth(); oa != nil {
		h.oauth = oa
		h.verifier = newVerifier(oa, nil)
	}
	return h
}

// Discover discovers every issuer of the tokens' [oauth] table now, in the
// background, rather than at the first token that names it, and again
// every discoveryRetry for each that failed, until ctx ends: a token does
// not wait on its issuer's discovery, and an issuer back up is known again
// without a token asking (docs/adr/0042-oauth-resource-server.md). It
// returns at once.
func (h *HTTPHandler) Discover(ctx context.Context) {
	if h.verifier == nil {
		return
	}
	for _, iss := range h.oauth.Issuers {
		go func() {
			for {
				_, err := h.verifier.issuer(ctx, iss)
				if err == nil {
					return
				}
				h.log.Warn("mcp over http: discovering an issuer", "issuer", iss, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(discoveryRetry):
				}
			}
		}()
	}
}

// NewFileHTTPHandler is [NewHTTPHandler] for the tokens of a file as it
// changes ([TokensFile]): each request is judged by the file as it is
// then. A token whose entry is gone, or now says another principal or
// scope, is no longer served, and its sessions end: a new entry's server
// is built afresh, by the code path every token's is.
func NewFileHTTPHandler(f *TokensFile, backendFor func(Token) (Backend, error), o Options) *HTTPHandler {
	h := NewHTTPHandler(f.Tokens(), backendFor, o)
	h.file = f
	return h
}

// MaxRequestBody bounds an HTTP request's body: the files one call may
// supply inline, base64-encoded, and room for the rest of it.
const MaxRequestBody = mcpapi.MaxInlineTotal/3*4 + 1<<20

// HTTPHandler serves MCP over Streamable HTTP (see [NewHTTPHandler]).
type HTTPHandler struct {
	// tokens are the ones served; with file, the file's as it was at
	// the last request, and guarded by mu.
	tokens     *Tokens
	file       *TokensFile
	backendFor func(Token) (Backend, error)
	o          Options
	log        *slog.Logger
	// oauth and verifier are set when the tokens file has an [oauth]
	// table.
	oauth    *OAuth
	verifier *verifier

	mu      sync.Mutex
	servers map[[32]byte]*tokenServer // by serverKey
	// requests counts the requests in progress but standalone streams;
	// idle, when set, is closed once there is none (Drain waits on it).
	requests int
	idle     chan struct{}
	// limiters are by principal id: one bucket for all of a principal's
	// tokens. Only a resolved token's principal, one the tokens file
	// names, gets one, so the map is as large as the file allows.
	limiters map[string]*rate.Limiter
}

// allow takes one request from principal's bucket; when it is empty it
// returns how long until there is one.
func (h *HTTPHandler) allow(principal string) (time.Duration, bool) {
	h.mu.Lock()
	l, ok := h.limiters[principal]
	if !ok {
		l = rate.NewLimiter(h.o.Rate, h.o.Burst)
		h.limiters[principal] = l
	}
	h.mu.Unlock()
	now := time.Now()
	res := l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 || !res.OK() {
		// Refused requests take nothing from the bucket.
		res.CancelAt(now)
		return d, false
	}
	return 0, true
}

// CodeTransportRefused is the JSON-RPC error code of a request the HTTP
// transport refuses before it reads a message: one of the range JSON-RPC
// 2.0 leaves to implementations for server errors, as the TypeScript SDK
// answers its own transport refusals.
const CodeTransportRefused = -32000

// transportError answers a request refused before its body is read with
// status and, as the body, a JSON-RPC error response with no id (none was
// read): the MCP transport specification's form for an Origin refused
// (docs/adr/0047-mcp-http-limits-tls-origin-body.md), which a client that
// reads only JSON-RPC can report.
func transportError(w http.ResponseWriter, status int, msg string) {
	out, _ := marshal(struct {
		JSONRPC string         `json:"jsonrpc"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", &jsonrpc.Error{Code: CodeTransportRefused, Message: msg}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(out)
}

// tokenServer is one token's server and its Streamable HTTP handler, built
// on first use.
type tokenServer struct {
	// tok is the token it serves, as resolved when it was made; source
	// is where its entry is now, for the log (a token file read again
	// may have moved it).
	tok    Token
	source atomic.Pointer[string]

	mu  sync.Mutex
	srv *mcp.Server
	sc  *scope
	h   http.Handler
}

// current returns the tokens to judge a request by: the file's as it is
// now, when the handler follows one. When they changed, the servers of
// the static tokens the file no longer holds as they were are dropped and
// their sessions ended, before any request is judged by the new tokens.
func (h *HTTPHandler) current() *Tokens {
	if h.file == nil {
		return h.tokens
	}
	t := h.file.Tokens()
	h.mu.Lock()
	if t == h.tokens {
		h.mu.Unlock()
		return t
	}
	h.tokens = t
	now := make(map[[32]byte]Token, len(t.list))
	for _, tok := range t.list {
		now[tok.sum] = tok
	}
	var gone []*tokenServer
	for key, ts := range h.servers {
		if ts.tok.oauth {
			continue // the [oauth] table is read at start only
		}
		tok, ok := now[ts.tok.sum]
		if !ok || serverKey(tok) != key {
			delete(h.servers, key)
			gone = append(gone, ts)
			continue
		}
		ts.source.Store(&tok.Source)
	}
	h.mu.Unlock()
	for _, ts := range gone {
		h.log.Info("mcp over http: a token's entry left the tokens file or changed: its sessions end", "principal", ts.tok.Principal, "token", *ts.source.Load())
		ts.close()
	}
	return t
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tokens := h.current()
	if !tokens.OriginAllowed(r.Header.Values("Origin")) {
		// The Streamable HTTP transport's DNS-rebinding defence: a page
		// from another origin, in a browser that reaches this address,
		// is answered 403 before its token is read
		// (docs/adr/0046-mcp-http-origin-token-type-limits.md).
		h.log.Info("mcp over http: request from an origin not allowed refused", "remote", r.RemoteAddr, "method", r.Method, "origin", r.Header.Get("Origin"))
		transportError(w, http.StatusForbidden, "forbidden: this Origin is not among the tokens file's origins")
		return
	}
	if r.URL.Query().Has("access_token") {
		// RFC 6750 §2.3, which OAuth 2.1 and the MCP authorization
		// specification forbid: a token in a URL ends up in logs and
		// histories. Refused even beside a good header, unread.
		h.log.Info("mcp over http: request with a token in its query string refused", "remote", r.RemoteAddr, "method", r.Method)
		h.challenge(w, `error="invalid_request", error_description="a token is sent in the Authorization header only"`)
		http.Error(w, "a token in the query string is refused: send it in the Authorization header", http.StatusBadRequest)
		return
	}
	tok, ok := tokens.Resolve(bearer(r.Header))
	if !ok && h.verifier != nil {
		if raw := bearer(r.Header); raw != "" {
			var err error
			tok, err = h.verifier.verify(r.Context(), raw)
			switch {
			case errors.Is(err, errInsufficientScope):
				h.log.Info("mcp over http: access token without a prod-write scope refused", "remote", r.RemoteAddr, "method", r.Method)
				h.challenge(w, fmt.Sprintf(`error="insufficient_scope", scope=%q`, OAuthScopeRead))
				http.Error(w, "forbidden: the token carries none of the scopes of this resource", http.StatusForbidden)
				return
			case err != nil:
				// The reason is the service's to read, never the
				// client's; it names no token.
				h.log.Info("mcp over http: access token refused", "remote", r.RemoteAddr, "method", r.Method, "err", err)
			default:
				ok = true
			}
		}
	}
	if !ok {
		// One answer for a missing, malformed or unknown token: which
		// part was wrong would help only someone guessing.
		h.log.Info("mcp over http: request without a known bearer token refused", "remote", r.RemoteAddr, "method", r.Method)
		h.challenge(w, "")
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if wait, ok := h.allow(tok.Principal); !ok {
		// Before any handler, and before the body is read.
		secs := int64(wait/time.Second) + 1
		h.log.Info("mcp over http: request over the principal's rate limit refused", "principal", tok.Principal, "token", tok.Source, "remote", r.RemoteAddr, "method", r.Method, "retry_after_s", secs)
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		http.Error(w, "too many requests for this principal: retry after the time Retry-After says", http.StatusTooManyRequests)
		return
	}
	if h.o.Calls != nil {
		// Asked as a call that ends at once: the stop waits for the
		// request's calls (joined), not for the request.
		_, done, ok := h.o.Calls.Join()
		if !ok {
			// The service stops: its listener is closed, and this
			// came on a connection opened before.
			w.Header().Set("Connection", "close")
			http.Error(w, errStopping, http.StatusServiceUnavailable)
			return
		}
		done()
	}
	if r.Method != http.MethodGet {
		// Drain waits until this request's answers are written, or its
		// client has gone. A session's standalone stream (GET) lasts as
		// long as the session and carries no call's answer.
		h.begin()
		defer h.end()
	}
	// A request body is read into memory: bounded, above what the
	// largest call (files supplied inline, base64) needs.
	r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBody)
	// The bearer has done its work: nothing past this point is handed it,
	// not even the SDK, which gives each request's headers to the tools.
	r = r.Clone(r.Context())
	r.Header.Del("Authorization")
	ts, err := h.serverFor(tok)
	if err != nil {
		h.log.Error("mcp over http: cannot serve a token", "token", tok.Source, "principal", tok.Principal, "err", err)
		http.Error(w, "the MCP server for this token is unavailable (the service's log says why)", http.StatusInternalServerError)
		return
	}
	if r.Method == http.MethodPost && h.oauth != nil && ts.sc.scope.ReadOnly && !h.o.ReadOnly {
		if h.stepUp(w, r, ts.sc) {
			return
		}
	}
	ts.h.ServeHTTP(w, r)
}

// challenge sets the WWW-Authenticate header of a refusal. With an [oauth]
// table it points to the metadata and names the scopes (RFC 9728 §5.1);
// params, when set, come first.
func (h *HTTPHandler) challenge(w http.ResponseWriter, params string) {
	if h.oauth == nil {
		if params == "" {
			w.Header().Set("WWW-Authenticate", "Bearer")
		} else {
			w.Header().Set("WWW-Authenticate", "Bearer "+params)
		}
		return
	}
	var ps []string
	if params != "" {
		ps = append(ps, params)
	}
	ps = append(ps, fmt.Sprintf("resource_metadata=%q", h.oauth.MetadataURL()))
	if !strings.Contains(params, "scope=") {
		ps = append(ps, fmt.Sprintf("scope=%q", strings.Join(scopesSupported, " ")))
	}
	w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(ps, ", "))
}

// stepUp answers 403 insufficient_scope, and reports true, when r calls by
// name a tool that the read-only scope sc refuses as out of its scope
// (docs/adr/0042-oauth-resource-server.md): the body is the JSON-RPC error
// the server would have sent, so that a client that reads only JSON-RPC
// learns as much. No handler runs. Otherwise r's body is left as it was
// for the SDK.
func (h *HTTPHandler) stepUp(w http.ResponseWriter, r *http.Request, sc *scope) bool {
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		// The SDK reads the same error and answers it.
		return false
	}
	for _, m := range callsIn(body) {
		err := sc.admit(m.name)
		var je *jsonrpc.Error
		if err == nil || !errors.As(err, &je) || !outOfScope(je) {
			continue
		}
		need := OAuthScopeAgent
		if m.name == runTool {
			need = OAuthScopeAgent + " " + OAuthScopeRun
		}
		h.log.Info("mcp over http: read-only token called a tool that writes", "remote", r.RemoteAddr, "principal", sc.principal.ID, "tool", m.name)
		h.challenge(w, fmt.Sprintf(`error="insufficient_scope", scope=%q`, need))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		out, _ := marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   *jsonrpc.Error  `json:"error"`
		}{"2.0", m.id, je})
		w.Write(out)
		return true
	}
	return false
}

// call is a tools/call request of a body: its id and the tool's name.
type call struct {
	id   json.RawMessage
	name string
}

// callsIn returns the tools/call requests of an HTTP body: one JSON-RPC
// message, or a batch (2025-03-26). A body that is neither has none: the
// SDK answers it.
func callsIn(body []byte) []call {
	type msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	var batch []msg
	if err := json.Unmarshal(body, &batch); err != nil {
		var one msg
		if err := json.Unmarshal(body, &one); err != nil {
			return nil
		}
		batch = []msg{one}
	}
	var out []call
	for _, m := range batch {
		if m.Method == "tools/call" && len(m.ID) > 0 {
			out = append(out, call{id: m.ID, name: m.Params.Name})
		}
	}
	return out
}

// outOfScope reports whether a protocol refusal is [OutOfScope]: what a
// wider scope would reach.
func outOfScope(je *jsonrpc.Error) bool {
	var r struct {
		Code refusal.Code `json:"code"`
	}
	return json.Unmarshal(je.Data, &r) == nil && r.Code == OutOfScope
}

// Mount serves h at path on mux and, with an [oauth] table, the protected
// resource metadata (RFC 9728) at both of its well-known URIs: the root
// one, and the one for the resource's path, which a client derives from
// the resource URI.
func (h *HTTPHandler) Mount(mux *http.ServeMux, path string) {
	mux.Handle(path, h)
	if h.oauth == nil {
		return
	}
	meta := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               h.oauth.Resource,
		AuthorizationServers:   h.oauth.Issuers,
		ScopesSupported:        scopesSupported,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "prod-write",
	})
	mux.Handle(wellKnown, meta)
	u, _ := url.Parse(h.oauth.MetadataURL())
	if u.Path != wellKnown {
		mux.Handle(u.Path, meta)
	}
	if p := wellKnown + strings.TrimSuffix(path, "/"); p != u.Path {
		mux.Handle(p, meta)
	}
}

// bearer returns the token of the request's one Authorization header, or ""
// when there is none, more than one, or another scheme.
func bearer(hd http.Header) string {
	vs := hd.Values("Authorization")
	if len(vs) != 1 {
		return ""
	}
	scheme, tok, ok := strings.Cut(vs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimLeft(tok, " ")
}

// serverKey is what a token's server is kept by: a static token's hash
// with its principal and scope, so that an entry whose principal or scope
// changed in a file read again never reaches the server built for it
// before; an access token's sum, which already holds them.
func serverKey(tok Token) [32]byte {
	if tok.oauth {
		return tok.sum
	}
	return sha256.Sum256(fmt.Appendf(nil, "token\x00%x\x00%s\x00%t\x00%t", tok.sum, tok.Principal, tok.Scope.ReadOnly, tok.Scope.AllowRun))
}

// serverFor returns tok's handler, building it on first use. A build that
// fails is not kept: the next request tries again, so a trust policy or
// registry fixed while the service runs takes effect without a restart.
func (h *HTTPHandler) serverFor(tok Token) (*tokenServer, error) {
	h.mu.Lock()
	key := serverKey(tok)
	ts, ok := h.servers[key]
	if !ok {
		ts = &tokenServer{tok: tok}
		ts.source.Store(&tok.Source)
		h.servers[key] = ts
	}
	h.mu.Unlock()

	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.h != nil {
		return ts, nil
	}
	b, err := h.backendFor(tok)
	if err != nil {
		return nil, fmt.Errorf("the backend for principal %q: %w", tok.Principal, err)
	}
	srv, sc, err := build(b, tok.Scope.Within(h.o.scope()), h.o.Version, h.hints(tok), h.o.Calls, true)
	if err != nil {
		return nil, fmt.Errorf("building the server for principal %q: %w", tok.Principal, err)
	}
	// The scope was resolved against pr's roles: it must be the token's
	// principal, or a token would borrow another principal's roles.
	if pr := sc.principal; pr == nil || pr.ID != tok.Principal {
		return nil, fmt.Errorf("the backend acts for %s, not for the token's principal %q", describe(pr), tok.Principal)
	}
	// Outermost, so that it sees the scope check's refusals too.
	srv.AddReceivingMiddleware(h.callLog(ts))
	ts.srv, ts.sc = srv, sc
	ts.h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Logger:         h.log,
		SessionTimeout: sessionIdle,
		// The one bound is ServeHTTP's, MaxRequestBody: the SDK's own
		// default (4 MiB) is below what inline files need
		// (docs/adr/0039-inline-files-over-mcp-http.md).
		MaxRequestBodyBytes: -1,
	})
	return ts, nil
}

// callLog logs one line per MCP request a token's server answers, as the
// socket logs one per call: the principal, the token's entry, the method
// and tool, the outcome and how long it took. Never an argument, a result
// or the bearer.
func (h *HTTPHandler) callLog(ts *tokenServer) mcp.Middleware {
	tok := ts.tok
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			start := time.Now()
			res, err := next(ctx, method, req)
			op := method
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && p != nil {
				op = method + " " + p.Name
			}
			outcome := "ok"
			var je *jsonrpc.Error
			switch {
			case errors.As(err, &je):
				outcome = fmt.Sprintf("error %d", je.Code)
			case err != nil:
				outcome = "error"
			default:
				if cr, ok := res.(*mcp.CallToolResult); ok && cr != nil && cr.IsError {
					outcome = "tool error"
				}
			}
			h.log.Info(fmt.Sprintf("mcp over http: principal %s (%s): %s: %s (%s)", tok.Principal, *ts.source.Load(), op, outcome, time.Since(start).Round(time.Microsecond)))
			return res, err
		}
	}
}

// begin and end count a request in progress.
func (h *HTTPHandler) begin() {
	h.mu.Lock()
	h.requests++
	h.mu.Unlock()
}

func (h *HTTPHandler) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.requests--; h.requests == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}

// Drain waits until no request is in progress but the sessions' standalone
// streams, so that the answers of the calls that ended are written, or
// until ctx is done, and then returns ctx's error. The runner service
// drains MCP over HTTP as it shuts it down, once every call has ended
// (Options.Calls), and then closes it (Close).
func (h *HTTPHandler) Drain(ctx context.Context) error {
	for {
		h.mu.Lock()
		if h.requests == 0 {
			h.mu.Unlock()
			return nil
		}
		if h.idle == nil {
			h.idle = make(chan struct{})
		}
		idle := h.idle
		h.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close ends every session of every token: their standalone streams end,
// so that a client holding one open does not hold a shutdown.
func (h *HTTPHandler) Close() {
	h.mu.Lock()
	servers := make([]*tokenServer, 0, len(h.servers))
	for _, ts := range h.servers {
		servers = append(servers, ts)
	}
	h.mu.Unlock()
	for _, ts := range servers {
		ts.close()
	}
}

// close ends ts's sessions.
func (ts *tokenServer) close() {
	ts.mu.Lock()
	srv := ts.srv
	ts.mu.Unlock()
	if srv == nil {
		return
	}
	for ss := range srv.Sessions() {
		ss.Close()
	}
}

// hints are what a refusal tells a token's client would expose what its
// scope omits. They name no file: the client is not the operator.
func (h *HTTPHandler) hints(tok Token) hints {
	hs := hints{
		runWhy:   "this token's entry does not allow run",
		run:      "allow_run = true on this token's entry in the service's tokens file",
		readOnly: `a token with scope = "agent"`,
	}
	if tok.oauth {
		hs.runWhy = "this token's [[oauth.principal]] entry or its scopes do not allow run"
		hs.run = fmt.Sprintf("allow_run = true on the token's [[oauth.principal]] entry and a token with the %s scope", OAuthScopeRun)
		hs.readOnly = fmt.Sprintf("a token with the %s scope, of an entry with scope = \"agent\"", OAuthScopeAgent)
	}
	if tok.Scope.AllowRun && !h.o.AllowRun {
		hs.runWhy, hs.run = "the service was started without --allow-run", "the service's --allow-run"
	}
	if !tok.Scope.ReadOnly && h.o.ReadOnly {
		hs.readOnly = "a service that is not read-only"
	}
	return hs
}

func describe(pr *approval.Principal) string {
	if pr == nil {
		return "no principal"
	}
	return fmt.Sprintf("principal %q", pr.ID)
}
