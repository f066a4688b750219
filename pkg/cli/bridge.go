package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/runner"
)

// SlackInteractionsPath is where bridge serve takes Slack's interaction
// requests: the Request URL of the Slack app is https://HOST/slack/interactions.
const SlackInteractionsPath = "/slack/interactions"

// BridgeServeOptions are bridge serve's inputs. It takes no flags: its
// configuration is prod-write.toml's [bridge] and its secrets come from the
// environment or files named there, never from the command line.
type BridgeServeOptions struct {
	F *Factory `json:"-"`
}

// NewCmdBridge builds `bridge` and `bridge serve`.
func NewCmdBridge(f *Factory, runF func(*BridgeServeOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bridge",
		Short: "The bridges: approve or deny filed plans on Slack and GitHub",
		Long: `bridge runs the service that lets approvers answer filed plans where they
work: Slack buttons and GitHub comments. See docs/BRIDGES.md.`,
		Example: "  PROD_WRITE_SLACK_SIGNING_SECRET=… PROD_WRITE_SLACK_BOT_TOKEN=xoxb-… prod-write bridge serve",
		Args:    cobra.NoArgs,
	}
	opts := &BridgeServeOptions{F: f}
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve Slack's interactions endpoint and poll GitHub for answers",
		Long: `serve runs the bridges as prod-write.toml's [bridge] configures it.

With slack_channel set it listens on bridge.listen for Slack's interaction
requests at /slack/interactions: it verifies Slack's request signature and
timestamp, maps the clicking Slack user to exactly one approver, refuses the
planner, the filer and unknown users with an ephemeral reply, and stores the
answer signed with the bridge key (bridge.key, a principal with role bridge).
With github_repo set it polls decision issues (or the pull request
github_pr) for "/approve FP" and "/deny FP" comments every github_poll, and
with github_webhook_secret_file set it also takes GitHub's issue_comment and
pull_request_review webhooks at /github/webhook on bridge.listen, verified
with that secret.

Secrets come from PROD_WRITE_SLACK_SIGNING_SECRET, PROD_WRITE_SLACK_BOT_TOKEN
and PROD_WRITE_GITHUB_TOKEN, or from the files slack_signing_secret_file,
slack_bot_token_file and github_token_file name; never from flags. It stops
cleanly on SIGINT or SIGTERM.`,
		Example: `  export PROD_WRITE_SLACK_SIGNING_SECRET=… PROD_WRITE_SLACK_BOT_TOKEN=xoxb-…
  prod-write bridge serve --config /etc/prod-write/prod-write.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return bridgeServeRun(opts)
		},
	}
	cmd.AddCommand(serve)
	return cmd
}

func bridgeServeRun(o *BridgeServeOptions) error {
	f := o.F
	if f.Net == nil {
		return f.HandOff("it serves the bridges")
	}
	c, err := f.Config()
	if err != nil {
		return err
	}
	b := c.Bridge
	if !localapi.SlackEnabled(b) && !localapi.GitHubEnabled(b) && !localapi.PageEnabled(b) {
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
		through = localapi.Client{Env: &g.Env}
	}
	s, err := newBridgeService(f, c, reg, policy, through)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return f.Net.ServeBridge(ctx, s)
}

// newBridgeService checks and loads what the bridges need: their key, their
// secrets (through f: the runner service passes a Factory with no
// environment, so there they come from files only) and the attestor.
//
// With through set, the bridges are clients of that API: they read through
// its DecisionData and have its AnswerAttested admit their answers, and
// open no store.
func newBridgeService(f *Factory, c *config.Config, reg *operations.Registry, policy *approval.Policy, through api.API) (*BridgeService, error) {
	b := c.Bridge
	if b.Key == "" {
		return nil, &config.Error{Path: c.Path, Msg: "[bridge] key is required: the bridge's own key, of a principal with role bridge"}
	}
	src := bridge.Source{Policy: policy, Registry: reg, Diffs: localapi.DiffRules(c), Page: localapi.PageOrigin(c, policy)}
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
	s := &BridgeService{Bridge: b, Attestor: att, Ledger: bridge.LedgerOf(c), Log: slog.New(slog.NewTextHandler(f.IO.Err, nil)), Events: bridge.EventsOf(c), Now: f.Now}
	if s.Requests, s.CheckEvery, err = bridge.RequestSettings(c); err != nil {
		return nil, err
	}
	if localapi.PageEnabled(b) {
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
			pageAPI = localapi.API{Env: &g.Env}
		}
		if s.Page, err = approvalpage.New(approvalpage.Config{Source: src, API: pageAPI, Key: key, Now: f.Now, Log: s.Log}); err != nil {
			return nil, err
		}
	}
	if len(att.Principal().Roles) > 1 {
		s.Log.Warn("the bridge's principal holds roles besides bridge; give the bridge a principal of its own", "principal", att.Principal().ID)
	}
	if localapi.GitHubEnabled(b) {
		if _, s.GitHubToken, err = localapi.NewGitHubPoster(&f.Env, c); err != nil {
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
	if localapi.SlackEnabled(b) {
		if b.Listen == "" {
			return nil, &config.Error{Path: c.Path, Msg: "[bridge] listen is required for Slack: the address Slack's interaction requests reach (behind a TLS proxy)"}
		}
		if s.SlackSigning, err = localapi.ReadSecret(&f.Env, c, bridge.EnvSlackSigningSecret, "slack_signing_secret_file", b.SlackSigningSecretFile); err != nil {
			return nil, err
		}
		if s.SlackToken, err = localapi.ReadSecret(&f.Env, c, bridge.EnvSlackBotToken, "slack_bot_token_file", b.SlackBotTokenFile); err != nil {
			return nil, err
		}
	}
	return s, nil
}
