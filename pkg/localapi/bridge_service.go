package localapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/runner"
)

// ServeBridges is `prod-write bridge serve`: the bridges configured in
// [bridge], on their own, until SIGINT or SIGTERM. As a client of the
// runner service when one is configured (ADR 0045). f must have the
// network backends (prod-write-net).
func ServeBridges(f *Env) error {
	if f.Net == nil {
		return errors.New("the bridges need the network backends (" + NetBinary + ")")
	}
	c, err := f.Config()
	if err != nil {
		return err
	}
	b := c.Bridge
	if !SlackEnabled(b) && !GitHubEnabled(b) && !PageEnabled(b) {
		return &config.Error{Path: c.Path, Msg: "no bridge is configured: set [bridge] slack_channel, github_repo and/or page_listen"}
	}
	reg, err := f.Registry(c)
	if err != nil {
		return err
	}
	policy, err := f.Policy(c)
	if err != nil {
		return err
	}
	if err := runner.CheckPins(c, policy, reg); err != nil {
		return err
	}
	var through api.API
	if c.Service.Socket != "" {
		// A client of the runner service (ADR 0045): it reads each
		// decision's plan and evidence through the service, judging them
		// by its own policy, and the service admits and stores each
		// answer after its own checks, so this account needs no access
		// to the store. It hands over its bridge key: a key of the
		// policy, which the service's DecisionData asks for.
		g := *f
		g.KeyPath = c.Bridge.Key
		through = ServiceClient{Env: &g}
	}
	s, err := NewBridgeService(f, c, reg, policy, through)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return f.Net.ServeBridge(ctx, s)
}

// NewBridgeService checks and loads what the bridges need: their key, their
// secrets (through f: the runner service passes a Factory with no
// environment, so there they come from files only) and the attestor.
//
// With through set, the bridges are clients of that API: they read through
// its DecisionData and have its AnswerAttested admit their answers, and
// open no store.
func NewBridgeService(f *Env, c *config.Config, reg *operations.Registry, policy *approval.Policy, through api.API) (*BridgeService, error) {
	b := c.Bridge
	if b.Key == "" {
		return nil, &config.Error{Path: c.Path, Msg: "[bridge] key is required: the bridge's own key, of a principal with role bridge"}
	}
	// Live: the runner service's reload reaches every bridge at once.
	src := bridge.Source{Policy: policy, Registry: reg, Diffs: DiffRules(c), Page: PageOrigin(c, policy), Live: bridge.NewLive(policy, reg)}
	if through == nil {
		st, err := f.Store(c)
		if err != nil {
			return nil, err
		}
		src.Store = st
	} else {
		src.Read = readThrough(through)
	}
	key, err := keys.Load(b.Key)
	if err != nil {
		return nil, err
	}
	att, err := bridge.NewAttestor(src, key, f.Now)
	if err != nil {
		return nil, err
	}
	if through != nil {
		att.Admit = admitThrough(through)
	}
	s := &BridgeService{Bridge: b, Attestor: att, Ledger: bridge.LedgerOf(c), Log: slog.New(slog.NewTextHandler(f.IO.Err, nil)), Events: bridge.EventsOf(c), Now: f.Now, Live: src.Live}
	if s.Requests, s.CheckEvery, err = bridge.RequestSettings(c); err != nil {
		return nil, err
	}
	if PageEnabled(b) {
		if policy.Passkey == nil {
			return nil, &config.Error{Path: c.Path, Msg: "[bridge] page_listen needs the approval page's origin: trust.toml's [passkey] origin"}
		}
		// The page is a client of the typed API with the bridge's key:
		// the service's socket when this is a client of the service,
		// else this process's own (ADR 0048).
		pageAPI := through
		if pageAPI == nil {
			g := *f
			g.KeyPath = b.Key
			pageAPI = API{Env: &g}
		}
		if s.Page, err = approvalpage.New(approvalpage.Config{Source: src, API: pageAPI, Key: key, Now: f.Now, Log: s.Log}); err != nil {
			return nil, err
		}
	}
	if len(att.Principal().Roles) > 1 {
		s.Log.Warn("the bridge's principal holds roles besides bridge; give the bridge a principal of its own", "principal", att.Principal().ID)
	}
	if GitHubEnabled(b) {
		if _, s.GitHubToken, err = NewGitHubPoster(f, c); err != nil {
			return nil, err
		}
		s.GitHubPoll = 30 * time.Second
		if b.GitHubPoll != "" {
			if s.GitHubPoll, err = time.ParseDuration(b.GitHubPoll); err != nil || s.GitHubPoll < time.Second {
				return nil, &config.Error{Path: c.Path, Msg: fmt.Sprintf("bridge.github_poll %q: want a duration of at least 1s", b.GitHubPoll)}
			}
		}
		if b.GitHubWebhookSecretFile != "" {
			if b.Listen == "" {
				return nil, &config.Error{Path: c.Path, Msg: "[bridge] listen is required for GitHub webhooks (github_webhook_secret_file): the address GitHub's deliveries reach (behind a TLS proxy)"}
			}
			// From the file only, never the environment or a flag.
			noEnv := func(string) (string, bool) { return "", false }
			if s.GitHubWebhookSecret, err = bridge.LoadSecret(noEnv, "", "bridge.github_webhook_secret_file", c.Abs(b.GitHubWebhookSecretFile)); err != nil {
				return nil, err
			}
		}
	}
	if SlackEnabled(b) {
		if b.Listen == "" {
			return nil, &config.Error{Path: c.Path, Msg: "[bridge] listen is required for Slack: the address Slack's interaction requests reach (behind a TLS proxy)"}
		}
		if s.SlackSigning, err = ReadSecret(f, c, bridge.EnvSlackSigningSecret, "slack_signing_secret_file", b.SlackSigningSecretFile); err != nil {
			return nil, err
		}
		if s.SlackToken, err = ReadSecret(f, c, bridge.EnvSlackBotToken, "slack_bot_token_file", b.SlackBotTokenFile); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// readThrough is a bridge source's Read through a.
func readThrough(a api.API) func(string) (*bridge.Input, error) {
	return func(fp string) (*bridge.Input, error) {
		ctx, cancel := context.WithTimeout(context.Background(), BridgeTimeout)
		defer cancel()
		r, err := a.DecisionData(ctx, api.DecisionDataRequest{Fingerprint: fp})
		if err != nil {
			return nil, err
		}
		return r.Input, nil
	}
}

// admitThrough is an attestor's Admit through a: a bridge that is a
// client of the runner service has its answers admitted, and stored, by
// the service.
func admitThrough(a api.API) func(bridge.Request, *approval.Envelope) (*bridge.Result, error) {
	return func(req bridge.Request, env *approval.Envelope) (*bridge.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), BridgeTimeout)
		defer cancel()
		r, err := a.AnswerAttested(ctx, api.AnswerAttestedRequest{Fingerprint: req.Fingerprint, Record: req.Record, Verdict: req.Verdict,
			Reason: req.Reason, Channel: req.Channel, Issued: req.Issued, Envelope: env})
		if err != nil {
			return nil, err
		}
		return &bridge.Result{ID: r.ID, Approver: r.Approver, Verdict: r.Verdict, Duplicate: r.Duplicate}, nil
	}
}
