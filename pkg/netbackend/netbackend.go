// Package netbackend is what prod-write-net adds to prod-write besides the
// AWS backends: the Slack and GitHub bridges' clients and servers, and the
// MCP server, behind [localapi.Net]. It links net/http, TLS and the MCP SDK,
// which prod-write itself does without (docs/adr/0010-network-binary.md).
package netbackend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/slack-go/slack"
	"golang.org/x/time/rate"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/githubbridge"
	"github.com/prod-write/prod-write/pkg/bridge/slackbridge"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/httplimit"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/version"
)

// Backend implements [localapi.Net].
type Backend struct{}

var _ localapi.Net = Backend{}

// httpClient is the bridges' client: no proxy from anyone's environment
// (http.DefaultTransport reads HTTP_PROXY/HTTPS_PROXY), so a caller's
// variables can never route a bridge token through a proxy of theirs.
func httpClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return &http.Client{Timeout: 10 * time.Second, Transport: t}
}

func slackClient(b config.Bridge, token bridge.Secret) *slack.Client {
	api := b.SlackAPI
	if api == "" {
		api = slack.APIURL
	}
	if !strings.HasSuffix(api, "/") {
		api += "/"
	}
	return slack.New(token.Reveal(), slack.OptionAPIURL(api), slack.OptionHTTPClient(httpClient()))
}

// SlackPoster implements [localapi.Net].
func (Backend) SlackPoster(b config.Bridge, token bridge.Secret) bridge.Poster {
	return &slackbridge.Poster{API: slackClient(b, token), Channel: b.SlackChannel}
}

// slackUpdater delivers what the interactions endpoint queues: message
// updates and ephemeral replies, after the endpoint has answered Slack.
// Pending ones are kept beside the ledger, in STATE/bridge/slack-outbox.
func slackUpdater(b config.Bridge, s *localapi.BridgeService) *slackbridge.Updater {
	dir := filepath.Join(filepath.Dir(s.Ledger.Dir), "slack-outbox")
	return slackbridge.NewUpdater(dir, slackClient(b, s.SlackToken), s.Attestor.Source, s.Log, s.SlackSigning, s.SlackToken)
}

// GitHubPoster implements [localapi.Net].
func (Backend) GitHubPoster(b config.Bridge, token bridge.Secret) (bridge.Poster, error) {
	return githubPoster(b, token)
}

func githubPoster(b config.Bridge, token bridge.Secret) (*githubbridge.Poster, error) {
	owner, repo, err := githubbridge.SplitRepo(b.GitHubRepo)
	if err != nil {
		return nil, err
	}
	client, err := githubbridge.NewClient(b.GitHubAPI, token, httpClient())
	if err != nil {
		return nil, err
	}
	return &githubbridge.Poster{Client: client, Owner: owner, Repo: repo, PR: b.GitHubPR}, nil
}

// ServeBridge implements [localapi.Net]: Slack's interactions endpoint on
// s.Bridge.Listen when the Slack bridge is on, and the GitHub poller when
// the GitHub bridge is.
func (Backend) ServeBridge(ctx context.Context, s *localapi.BridgeService) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	b, log := s.Bridge, s.Log
	var poller *githubbridge.Poller
	var ghPoster *githubbridge.Poster
	if b.GitHubRepo != "" {
		p, err := githubPoster(b, s.GitHubToken)
		if err != nil {
			return err
		}
		ghPoster = p
		poller = &githubbridge.Poller{Client: p.Client, Owner: p.Owner, Repo: p.Repo, Attestor: s.Attestor, Ledger: s.Ledger, Log: log, Token: s.GitHubToken}
	}
	var srv *http.Server
	var ln net.Listener
	var mux *http.ServeMux
	var updates *slackbridge.Updater
	if b.SlackChannel != "" {
		updates = slackUpdater(b, s)
		var err error
		if srv, ln, mux, err = bridgeListener(b.Listen, log); err != nil {
			return err
		}
		mux.Handle(slackbridge.InteractionsPath, &slackbridge.Handler{
			SigningSecret: s.SlackSigning, Updates: updates, Attestor: s.Attestor, Team: b.SlackTeam, Log: log,
		})
	}
	if poller != nil && !s.GitHubWebhookSecret.Empty() {
		// GitHub's webhooks, the real-time path, on the same listener;
		// the poller stays the fallback and shares their judgement.
		if srv == nil {
			var err error
			if srv, ln, mux, err = bridgeListener(b.Listen, log); err != nil {
				return err
			}
		}
		mux.Handle(githubbridge.WebhookPath, &githubbridge.Webhook{Secret: s.GitHubWebhookSecret, Poller: poller})
		log.Info("github webhooks on", "path", githubbridge.WebhookPath)
	}

	// The approval page (ADR 0048), on its own listener, behind the TLS
	// termination of trust.toml's [passkey] origin.
	var pageSrv *http.Server
	var pageLn net.Listener
	if s.Page != nil {
		pageSrv = &http.Server{Handler: s.Page, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		var err error
		if pageLn, err = net.Listen("tcp", b.PageListen); err != nil {
			if ln != nil {
				ln.Close()
			}
			return fmt.Errorf("listening on %s: %w", b.PageListen, err)
		}
		pageLn = httplimit.Page.Bound(pageSrv, pageLn)
		log.Info("approval page on", "listen", addrOf(pageLn), "origin", s.Page.Origin())
	}

	log.Info("bridge serving", "principal", s.Attestor.Principal().ID, "slack", b.SlackChannel != "", "github", poller != nil, "page", s.Page != nil, "listen", addrOf(ln))
	errc := make(chan error, 2)
	if pageSrv != nil {
		go func() {
			if err := pageSrv.Serve(pageLn); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	if srv != nil {
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	done := make(chan struct{})
	if poller != nil {
		go func() {
			defer close(done)
			poller.Run(ctx, s.GitHubPoll)
		}()
	} else {
		close(done)
	}
	var posters []bridge.Poster
	if b.SlackChannel != "" {
		posters = append(posters, &slackbridge.Poster{API: slackClient(b, s.SlackToken), Channel: b.SlackChannel})
	}
	if ghPoster != nil {
		// The poller's own client: one rate limiter for every call to
		// GitHub, follow-ups included.
		posters = append(posters, ghPoster)
	}
	follow := &bridge.FollowUps{Source: s.Attestor.Source, Ledger: s.Ledger, Events: s.Events, Posters: posters,
		Settings: s.Requests, Log: log, Now: s.Now}
	if follow.Now == nil {
		follow.Now = time.Now
	}
	if follow.Events == nil {
		follow.Events = &bridge.Events{Dir: filepath.Join(filepath.Dir(s.Ledger.Dir), "events")}
	}
	every := s.CheckEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		follow.Run(ctx, every)
	}()
	updated := make(chan struct{})
	if updates != nil {
		go func() {
			defer close(updated)
			updates.Run(ctx)
		}()
	} else {
		close(updated)
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		stop()
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	if pageSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = pageSrv.Shutdown(sctx)
	}
	<-done
	<-updated
	<-followed
	log.Info("bridge stopped")
	return serveErr
}

// bridgeListener is the bridges' HTTP server on listen, for Slack's
// interactions and GitHub's webhooks, bounded by httplimit.Bridges; its
// handler is a mux serving /healthz, to which each adds its path.
func bridgeListener(listen string, log *slog.Logger) (*http.Server, net.Listener, *http.ServeMux, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listening on %s: %w", listen, err)
	}
	return srv, httplimit.Bridges.Bound(srv, ln), mux, nil
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// MCPTokens implements [localapi.Net].
func (Backend) MCPTokens() mcpapi.TokensFile { return mcpserver.TokensEditor{} }

// ServeMCPHTTP implements [localapi.Net].
func (Backend) ServeMCPHTTP(ctx context.Context, s config.Service, backendFor func(string) (mcpapi.Backend, error), calls mcpapi.Calls, log *slog.Logger, ready func()) error {
	// The file is read again at the first request after it changes:
	// `prod-write mcp token add` and `revoke` take effect without a
	// restart (docs/adr/0061-mcp-tokens-on-the-cli.md).
	file, err := mcpserver.OpenTokensFile(s.MCPTokens, log)
	if err != nil {
		return err
	}
	tokens := file.Tokens()
	// Every token must name a principal the service can act for, before
	// anything is served.
	for _, t := range tokens.All() {
		if _, err := backendFor(t.Principal); err != nil {
			return fmt.Errorf("%s: %w", t.Source, err)
		}
	}
	if o := tokens.OAuth(); o != nil {
		for _, p := range o.Principals {
			if _, err := backendFor(p.Principal); err != nil {
				return fmt.Errorf("%s: %w", p.Source, err)
			}
		}
	}
	h := mcpserver.NewFileHTTPHandler(file, func(t mcpserver.Token) (mcpserver.Backend, error) { return backendFor(t.Principal) },
		mcpserver.Options{AllowRun: s.MCPAllowRun, Version: version.Version, Logger: log, Calls: calls,
			Rate: rate.Limit(s.MCPRate), Burst: s.MCPBurst})
	// The issuers are known before the first token names them.
	h.Discover(ctx)
	// The key file is checked before anything listens: a key others can
	// read stops the service at start.
	var tlsConf *tls.Config
	if s.MCPTLSCert != "" || s.MCPTLSKey != "" {
		if tlsConf, err = mcpTLSConfig(s.MCPTLSCert, s.MCPTLSKey, log); err != nil {
			return err
		}
		// Served over HTTPS only, an http:// resource is a URI no client
		// reaches, and whose tokens' audience no client would ask for.
		// (Without TLS here, an https:// resource is a proxy's: allowed.)
		if o := tokens.OAuth(); o != nil && strings.HasPrefix(o.Resource, "http://") {
			return fmt.Errorf("%s: oauth.resource %q is http://, but service.mcp_tls_cert serves MCP over HTTPS only: name the https:// URI clients reach", s.MCPTokens, o.Resource)
		}
	}
	ln, err := net.Listen("tcp", s.MCPListen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	// The MCP endpoint and, with an [oauth] table in the tokens file, its
	// RFC 9728 metadata at the well-known URIs.
	h.Mount(mux, "/mcp")
	// Header, body and idle deadlines and a connection cap: no client,
	// authenticated or not, holds the service's descriptors for long
	// (httplimit.MCP). No read or write timeout on the whole
	// exchange: a wait for a decision, or a session's stream, may last.
	srv := &http.Server{Handler: mux, TLSConfig: tlsConf}
	ln = httplimit.MCP.Bound(srv, ln)
	var stopped atomic.Bool
	calls.OnStop(func() {
		// The service stops: no new connection, before any call learns
		// of the stop (ADR 0031). The calls in progress go on.
		stopped.Store(true)
		ln.Close()
	})
	log.Info("serving MCP over Streamable HTTP", "addr", ln.Addr().String(), "path", "/mcp", "tls", tlsConf != nil, "tokens", tokens.Len(), "oauth", tokens.OAuth() != nil)
	if ready != nil {
		ready()
	}
	errc := make(chan error, 1)
	go func() {
		if tlsConf != nil {
			errc <- srv.ServeTLS(ln, "", "")
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !stopped.Load() {
			return err
		}
		<-ctx.Done()
	}
	// The service waited for every call (Calls): what is left is the
	// last answers being written to their clients, and then the
	// sessions' standalone streams, which would hold the shutdown.
	sctx, cancel := context.WithTimeout(context.Background(), mcpShutdownGrace)
	defer cancel()
	srv.RegisterOnShutdown(func() {
		h.Drain(sctx)
		h.Close()
	})
	if err := srv.Shutdown(sctx); err != nil {
		// Every call has ended, with its receipts: a client that did
		// not read its answer in time does not fail the stop.
		log.Warn("mcp over http: closing the connections still open", "err", err)
		srv.Close()
	}
	return nil
}

// mcpShutdownGrace bounds how long MCP over HTTP takes to shut down once
// the service has no call left: a client slow to send a request or to
// read its last answer.
var mcpShutdownGrace = 5 * time.Second

// ServeMCP implements [localapi.Net].
func (Backend) ServeMCP(ctx context.Context, b mcpapi.Backend, allowRun bool, in io.Reader, out io.Writer) error {
	srv, err := mcpserver.New(b, mcpserver.Options{AllowRun: allowRun, Version: version.Version})
	if err != nil {
		return err
	}
	// StdioTransport, not the SDK's IOTransport alone: it answers a
	// malformed line instead of ending the session, and answers every
	// request read before stdin ended before the session ends.
	err = srv.Run(ctx, mcpserver.StdioTransport(in, out))
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
