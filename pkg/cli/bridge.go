package cli

import (
	"context"
	"errors"
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
	"github.com/prod-write/prod-write/pkg/runner"
)

// SlackInteractionsPath is where bridge serve takes Slack's interaction
// requests: the Request URL of the Slack app is https://HOST/slack/interactions.
const SlackInteractionsPath = "/slack/interactions"

// BridgeTimeout bounds what file and withdraw wait for the bridges.
const BridgeTimeout = 15 * time.Second

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

// SlackEnabled and githubEnabled say which bridges the configuration turns
// on.
func SlackEnabled(b config.Bridge) bool  { return b.SlackChannel != "" }
func GitHubEnabled(b config.Bridge) bool { return b.GitHubRepo != "" }
func PageEnabled(b config.Bridge) bool   { return b.PageListen != "" }

// PageOrigin is the approval page's origin when c serves one, else "".
func PageOrigin(c *config.Config, p *approval.Policy) string {
	if !PageEnabled(c.Bridge) || p == nil || p.Passkey == nil {
		return ""
	}
	return p.Passkey.Origin
}

func ReadSecret(f *Factory, c *config.Config, env, key, file string) (bridge.Secret, error) {
	s, err := bridge.LoadSecret(f.LookupEnv, env, "bridge."+key, c.Abs(file))
	var missing *bridge.MissingSecretError
	if errors.As(err, &missing) {
		return s, &config.Error{Path: c.Path, Msg: "the bridge needs a secret", Err: err}
	}
	return s, err
}

// posters returns the bridges decisions are posted to. A bridge that is
// configured but lacks its token is returned as an error, not silently
// skipped.
func posters(f *Factory, c *config.Config) ([]bridge.Poster, []bridge.Secret, []error) {
	var out []bridge.Poster
	var secrets []bridge.Secret
	var errs []error
	b := c.Bridge
	if f.Net == nil && (SlackEnabled(b) || GitHubEnabled(b)) {
		// Config hands file and withdraw to prod-write-net when bridges
		// are on, so this is a build or wiring error; say so.
		return nil, nil, []error{fmt.Errorf("this build cannot reach the bridges: run %s", NetBinary)}
	}
	if SlackEnabled(b) {
		token, err := ReadSecret(f, c, bridge.EnvSlackBotToken, "slack_bot_token_file", b.SlackBotTokenFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("slack: %w", err))
		} else {
			out = append(out, f.Net.SlackPoster(b, token))
			secrets = append(secrets, token)
		}
	}
	if GitHubEnabled(b) {
		p, token, err := NewGitHubPoster(f, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("github: %w", err))
		} else {
			out = append(out, p)
			secrets = append(secrets, token)
		}
	}
	return out, secrets, errs
}

func NewGitHubPoster(f *Factory, c *config.Config) (bridge.Poster, bridge.Secret, error) {
	token, err := ReadSecret(f, c, bridge.EnvGitHubToken, "github_token_file", c.Bridge.GitHubTokenFile)
	if err != nil {
		return nil, token, err
	}
	p, err := f.Net.GitHubPoster(c.Bridge, token)
	if err != nil {
		return nil, token, &config.Error{Path: c.Path, Msg: err.Error()}
	}
	return p, token, nil
}

// DiffRules are the rules by which the bridges read diffs: read by this
// process (the filer's in local mode, the runner service's or bridge
// serve's otherwise), under bridge.diff_roots only.
func DiffRules(c *config.Config) *bridge.DiffRules {
	return &bridge.DiffRules{Roots: c.Bridge.DiffRoots}
}

func Warnf(f *Factory, format string, args ...any) {
	fmt.Fprintf(f.IO.Err, "prod-write: warning: "+format+"\n", args...)
}

// notifyFiled posts the decision on a newly stored certainty record to the
// configured bridges. It cannot fail the command: the record is stored, and
// a decision that was not posted can still be answered with decide.
func notifyFiled(f *Factory, pc *planContext, record string) {
	if !SlackEnabled(pc.Config.Bridge) && !GitHubEnabled(pc.Config.Bridge) {
		return
	}
	ps, secrets, errs := posters(f, pc.Config)
	for _, err := range errs {
		Warnf(f, "the decision was not posted: %s", bridge.Redact(err.Error(), secrets...))
	}
	if len(ps) == 0 {
		return
	}
	src := bridge.Source{Policy: pc.Policy, Registry: pc.Registry, Store: pc.Store, Diffs: DiffRules(pc.Config), Page: PageOrigin(pc.Config, pc.Policy)}
	v, err := bridge.Describe(src, pc.Plan.Fingerprint, record, f.Now().UTC())
	if err != nil {
		Warnf(f, "the decision was not posted: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), BridgeTimeout)
	defer cancel()
	posts, errs := bridge.Notify(ctx, bridge.LedgerOf(pc.Config), ps, v)
	for _, err := range errs {
		Warnf(f, "%s", bridge.Redact(err.Error(), secrets...))
	}
	if f.JSON {
		return
	}
	for _, p := range posts {
		fmt.Fprintf(f.IO.Err, "prod-write: decision posted to %s%s\n", p.Kind, where(p))
	}
}

// notifyWithdrawn marks the plan's posted decisions withdrawn (SPEC §3: its
// pending decisions on the bridges are closed). The withdrawal is stored
// already; a bridge that cannot be reached is a warning.
func notifyWithdrawn(f *Factory, pc *planContext) {
	l := bridge.LedgerOf(pc.Config)
	posted, err := l.Posts(pc.Plan.Fingerprint)
	if err != nil {
		Warnf(f, "reading where the decision was posted: %v", err)
		return
	}
	if len(posted) == 0 {
		return
	}
	ps, secrets, errs := posters(f, pc.Config)
	for _, err := range errs {
		Warnf(f, "the posted decision was not closed: %s", bridge.Redact(err.Error(), secrets...))
	}
	src := bridge.Source{Policy: pc.Policy, Registry: pc.Registry, Store: pc.Store}
	now := f.Now().UTC()
	ctx, cancel := context.WithTimeout(context.Background(), BridgeTimeout)
	defer cancel()
	done, errs := bridge.NotifyWithdrawn(ctx, l, ps, pc.Plan.Fingerprint, func(record string) (*bridge.View, error) {
		return bridge.Describe(src, pc.Plan.Fingerprint, record, now)
	})
	for _, err := range errs {
		Warnf(f, "%s", bridge.Redact(err.Error(), secrets...))
	}
	if f.JSON {
		return
	}
	for _, p := range done {
		fmt.Fprintf(f.IO.Err, "prod-write: decision on %s marked withdrawn%s\n", p.Kind, where(p))
	}
}

func where(p bridge.Post) string {
	switch {
	case p.URL != "":
		return " (" + p.URL + ")"
	case p.Kind == bridge.KindSlack:
		return fmt.Sprintf(" (channel %s, message %s)", p.SlackChannel, p.SlackTS)
	case p.Kind == bridge.KindGitHub:
		return fmt.Sprintf(" (%s#%d)", p.GitHubRepo, p.GitHubIssue)
	}
	return ""
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
		through = serviceAPI{f: &g}
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
	src := bridge.Source{Policy: policy, Registry: reg, Diffs: DiffRules(c), Page: PageOrigin(c, policy)}
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
