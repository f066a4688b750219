package localapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/config"
)

// BridgeTimeout bounds what file and withdraw wait for the bridges.
const BridgeTimeout = 15 * time.Second

// SlackEnabled and githubEnabled say which bridges the configuration turns
// on.
func SlackEnabled(b config.Bridge) bool { return b.SlackChannel != "" }

func GitHubEnabled(b config.Bridge) bool { return b.GitHubRepo != "" }

func PageEnabled(b config.Bridge) bool { return b.PageListen != "" }

// PageOrigin is the approval page's origin when c serves one, else "".
func PageOrigin(c *config.Config, p *approval.Policy) string {
	if !PageEnabled(c.Bridge) || p == nil || p.Passkey == nil {
		return ""
	}
	return p.Passkey.Origin
}

func ReadSecret(f *Env, c *config.Config, env, key, file string) (bridge.Secret, error) {
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
func posters(f *Env, c *config.Config) ([]bridge.Poster, []bridge.Secret, []error) {
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

func NewGitHubPoster(f *Env, c *config.Config) (bridge.Poster, bridge.Secret, error) {
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

// notifyFiled posts the decision on a newly stored certainty record to the
// configured bridges. It cannot fail the command: the record is stored, and
// a decision that was not posted can still be answered with decide.
func notifyFiled(f *Env, pc *planContext, record string) {
	if !SlackEnabled(pc.Config.Bridge) && !GitHubEnabled(pc.Config.Bridge) {
		return
	}
	ps, secrets, errs := posters(f, pc.Config)
	for _, err := range errs {
		f.Warn("the decision was not posted: %s", bridge.Redact(err.Error(), secrets...))
	}
	if len(ps) == 0 {
		return
	}
	src := bridge.Source{Policy: pc.Policy, Registry: pc.Registry, Store: pc.Store, Diffs: DiffRules(pc.Config), Page: PageOrigin(pc.Config, pc.Policy)}
	v, err := bridge.Describe(src, pc.Plan.Fingerprint, record, f.Now().UTC())
	if err != nil {
		f.Warn("the decision was not posted: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), BridgeTimeout)
	defer cancel()
	posts, errs := bridge.Notify(ctx, bridge.LedgerOf(pc.Config), ps, v)
	for _, err := range errs {
		f.Warn("%s", bridge.Redact(err.Error(), secrets...))
	}
	for _, p := range posts {
		f.Notify(api.Notice{Kind: api.NoticePosted, Text: fmt.Sprintf("decision posted to %s%s", p.Kind, where(p)), Channel: p.Kind, URL: p.URL})
	}
}

// notifyWithdrawn marks the plan's posted decisions withdrawn (docs/DESIGN.md §3: its
// pending decisions on the bridges are closed). The withdrawal is stored
// already; a bridge that cannot be reached is a warning.
func notifyWithdrawn(f *Env, pc *planContext) {
	l := bridge.LedgerOf(pc.Config)
	posted, err := l.Posts(pc.Plan.Fingerprint)
	if err != nil {
		f.Warn("reading where the decision was posted: %v", err)
		return
	}
	if len(posted) == 0 {
		return
	}
	ps, secrets, errs := posters(f, pc.Config)
	for _, err := range errs {
		f.Warn("the posted decision was not closed: %s", bridge.Redact(err.Error(), secrets...))
	}
	src := bridge.Source{Policy: pc.Policy, Registry: pc.Registry, Store: pc.Store}
	now := f.Now().UTC()
	ctx, cancel := context.WithTimeout(context.Background(), BridgeTimeout)
	defer cancel()
	done, errs := bridge.NotifyWithdrawn(ctx, l, ps, pc.Plan.Fingerprint, func(record string) (*bridge.View, error) {
		return bridge.Describe(src, pc.Plan.Fingerprint, record, now)
	})
	for _, err := range errs {
		f.Warn("%s", bridge.Redact(err.Error(), secrets...))
	}
	for _, p := range done {
		f.Notify(api.Notice{Kind: api.NoticeWithdrawn, Text: fmt.Sprintf("decision on %s marked withdrawn%s", p.Kind, where(p)), Channel: p.Kind, URL: p.URL})
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
