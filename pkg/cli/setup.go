package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/provision"
)

// SetupServiceOptions are `setup service`'s inputs.
type SetupServiceOptions struct {
	F *Factory `json:"-"`

	Root        string // a prefix every path is written under
	Etc         string
	State       string
	Socket      string
	User        string // the service account
	SocketGroup string
	Agent       string // the agent's account; "" writes no client configuration
	AgentHome   string // its home; "" is the account's
	// Bridge secret files ("-": standard input), by their [bridge] key.
	SlackSigningSecret, SlackBotToken, GitHubToken, GitHubWebhookSecret string

	// LookupUser and LookupGroup find accounts; nil means os/user's.
	LookupUser  func(string) (*user.User, error)  `json:"-"`
	LookupGroup func(string) (*user.Group, error) `json:"-"`
}

// NewCmdSetup builds `setup`, whose one subcommand is `service`.
func NewCmdSetup(f *Factory, runF func(*SetupServiceOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "setup",
		Short:   "Set up a host: the runner service's layout",
		Example: `  prod-write setup service --user prod-write --agent agent`,
	}
	opts := &SetupServiceOptions{F: f}
	svc := &cobra.Command{
		Use:   "service",
		Short: "Write the runner service's documented layout (run as root)",
		Long: `setup service writes, as docs/DEPLOYMENT.md lays it out: root's policy
(prod-write.toml, trust.toml, an empty operations/ registry) in --etc; the
service account's credentials directory there; its state directory, with
a new runner key (and, with any bridge secret, a bridge key and the
secrets) in --state; and the agent's client configuration, naming only the
socket, in the agent's home. trust.toml holds the runner (and bridge)
principals and commented places for the agent and the humans, whose keys
each makes for itself.

It never overwrites: if any file it would write exists, it writes nothing
and says which (there is no --force: move the old file away). It follows no
symbolic link in a directory another account may write, creates every file
exclusively, and sets each owner and mode itself. A bridge secret comes
only from the file (or standard input, "-") named, and never empty.

The accounts (--user, --socket-group, --agent) must exist: setup creates
none. --root writes everything below a prefix (a scratch root, an image
being built); the accounts are still this host's.`,
		Example: `  prod-write setup service
  prod-write setup service --agent agent --slack-signing-secret /root/slack-signing-secret --slack-bot-token -`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return setupServiceRun(opts)
		},
	}
	fl := svc.Flags()
	fl.StringVar(&opts.Root, "root", "/", "write every path below this `DIR`")
	fl.StringVar(&opts.Etc, "etc", "/etc/prod-write", "the policy's `DIR` (root's)")
	fl.StringVar(&opts.State, "state", "/var/lib/prod-write", "the service's state `DIR`")
	fl.StringVar(&opts.Socket, "socket", "/run/prod-write/prod-write.sock", "the service's socket `PATH` (not created)")
	fl.StringVar(&opts.User, "user", "prod-write", "the service `ACCOUNT`")
	fl.StringVar(&opts.SocketGroup, "socket-group", "prod-write-callers", "the callers' `GROUP` (\"\": the service's own)")
	fl.StringVar(&opts.Agent, "agent", "agent", "the agent's `ACCOUNT`, whose client configuration is written (\"\": none)")
	fl.StringVar(&opts.AgentHome, "agent-home", "", "the agent's home `DIR`, which must exist (default: the account's)")
	fl.StringVar(&opts.SlackSigningSecret, "slack-signing-secret", "", "the Slack bridge's signing secret, from `FILE` (\"-\": stdin)")
	fl.StringVar(&opts.SlackBotToken, "slack-bot-token", "", "the Slack bridge's bot token, from `FILE` (\"-\": stdin)")
	fl.StringVar(&opts.GitHubToken, "github-token", "", "the GitHub bridge's token, from `FILE` (\"-\": stdin)")
	fl.StringVar(&opts.GitHubWebhookSecret, "github-webhook-secret", "", "the GitHub bridge's webhook secret, from `FILE` (\"-\": stdin)")
	cmd.AddCommand(svc)
	return cmd
}

// setupAccount looks an account up, saying what to do when it is missing.
func setupAccount(lookup func(string) (*user.User, error), name, what string) (provision.Account, string, error) {
	u, err := lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return provision.Account{}, "", &localapi.DataError{Err: fmt.Errorf("no account %q (%s): create it first (docs/DEPLOYMENT.md, step 1); setup creates none", name, what)}
		}
		return provision.Account{}, "", fmt.Errorf("looking up %s: %w", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return provision.Account{}, "", fmt.Errorf("account %s: %w", name, err)
	}
	return provision.Account{Name: name, UID: uid, GID: gid}, u.HomeDir, nil
}

// readSecret reads a bridge secret from the file the operator named, or
// stdin for "-", refusing one that is empty or only white space.
func readSecret(o *SetupServiceOptions, flag, from string) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	if from == "-" {
		b, err = io.ReadAll(io.LimitReader(o.F.IO.In, 64<<10))
	} else {
		b, err = os.ReadFile(from)
	}
	if err != nil {
		return nil, fmt.Errorf("reading --%s: %w", flag, err)
	}
	// Written as given: the bridge trims white space when it reads it.
	if strings.TrimSpace(string(b)) == "" {
		return nil, &localapi.DataError{Err: fmt.Errorf("--%s %s is empty: setup never writes an empty secret", flag, from)}
	}
	return b, nil
}

func setupServiceRun(o *SetupServiceOptions) error {
	lookupUser, lookupGroup := o.LookupUser, o.LookupGroup
	if lookupUser == nil {
		lookupUser = user.Lookup
	}
	if lookupGroup == nil {
		lookupGroup = user.LookupGroup
	}
	for _, p := range []struct{ flag, v string }{{"etc", o.Etc}, {"state", o.State}, {"socket", o.Socket}} {
		if !filepath.IsAbs(p.v) || filepath.Clean(p.v) != p.v {
			return &localapi.UsageError{Msg: fmt.Sprintf("--%s %q: want a clean absolute path", p.flag, p.v)}
		}
	}
	svc, _, err := setupAccount(lookupUser, o.User, "the service account, --user")
	if err != nil {
		return err
	}
	if svc.UID == 0 {
		return &localapi.DataError{Err: errors.New("--user root: the service account must not be root (docs/DEPLOYMENT.md)")}
	}
	if o.SocketGroup != "" {
		if _, err := lookupGroup(o.SocketGroup); err != nil {
			var unknown user.UnknownGroupError
			if errors.As(err, &unknown) {
				return &localapi.DataError{Err: fmt.Errorf("no group %q (the callers', --socket-group): create it first (docs/DEPLOYMENT.md, step 1)", o.SocketGroup)}
			}
			return fmt.Errorf("looking up group %s: %w", o.SocketGroup, err)
		}
	}
	var agent provision.Account
	var agentHome string
	if o.Agent != "" {
		if agent, agentHome, err = setupAccount(lookupUser, o.Agent, "the agent, --agent"); err != nil {
			return err
		}
		if o.AgentHome != "" {
			agentHome = o.AgentHome
		}
		if !filepath.IsAbs(agentHome) || filepath.Clean(agentHome) != agentHome || agentHome == "/" {
			return &localapi.DataError{Err: fmt.Errorf("the agent %s has home %q: setup writes its client configuration there, so it must be a directory of its own", o.Agent, agentHome)}
		}
	}
	secrets := []struct{ flag, key, name, from string }{
		{"slack-signing-secret", "slack_signing_secret_file", "slack-signing-secret", o.SlackSigningSecret},
		{"slack-bot-token", "slack_bot_token_file", "slack-bot-token", o.SlackBotToken},
		{"github-token", "github_token_file", "github-token", o.GitHubToken},
		{"github-webhook-secret", "github_webhook_secret_file", "github-webhook-secret", o.GitHubWebhookSecret},
	}
	stdin := 0
	for _, s := range secrets {
		if s.from == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return &localapi.UsageError{Msg: "only one bridge secret can come from standard input"}
	}

	etc, state := o.Etc, o.State
	svcDir := func(p string) provision.Dir { return provision.Dir{Path: p, Owner: svc, Mode: 0o700} }
	l := provision.Layout{Dirs: []provision.Dir{
		{Path: etc, Owner: provision.Root, Mode: 0o755},
		{Path: filepath.Join(etc, "operations"), Owner: provision.Root, Mode: 0o755},
		svcDir(filepath.Join(etc, "credentials")),
		svcDir(state),
		svcDir(filepath.Join(state, "store")),
		svcDir(filepath.Join(state, "store", "plans")),
		svcDir(filepath.Join(state, "store", "evidence")),
		svcDir(filepath.Join(state, "store", "consumed")),
		svcDir(filepath.Join(state, "journal")),
	}}
	runner, err := keys.Generate()
	if err != nil {
		return err
	}
	runnerKey := filepath.Join(state, "runner.key")
	l.Files = append(l.Files, provision.File{Path: runnerKey, Data: runner.MarshalPEM(), Owner: svc, Mode: 0o600})

	var bridgeConf strings.Builder
	var bridge *keys.Private
	for _, s := range secrets {
		if s.from == "" {
			continue
		}
		data, err := readSecret(o, s.flag, s.from)
		if err != nil {
			return err
		}
		if bridge == nil {
			if bridge, err = keys.Generate(); err != nil {
				return err
			}
			l.Dirs = append(l.Dirs, svcDir(filepath.Join(state, "bridge")))
			bridgeKey := filepath.Join(state, "bridge.key")
			l.Files = append(l.Files, provision.File{Path: bridgeKey, Data: bridge.MarshalPEM(), Owner: svc, Mode: 0o600})
			fmt.Fprintf(&bridgeConf, "\n[bridge]   # docs/BRIDGES.md\nkey = %q\n# slack_channel = \"#prod-decisions\"\n# github_repo = \"OWNER/REPO\"\n", bridgeKey)
		}
		p := filepath.Join(state, "bridge", s.name)
		l.Files = append(l.Files, provision.File{Path: p, Data: data, Owner: svc, Mode: 0o600})
		fmt.Fprintf(&bridgeConf, "%s = %q\n", s.key, p)
	}

	var conf strings.Builder
	fmt.Fprintf(&conf, "# prod-write's service configuration (docs/DEPLOYMENT.md), written by\n# `prod-write setup service`. The registry and trust policy are\n# operations/ and trust.toml beside it.\nstate = %q\nrunner_key = %q\n\n[service]\nsocket = %q\n", state, runnerKey, o.Socket)
	if o.SocketGroup != "" {
		fmt.Fprintf(&conf, "socket_group = %q\n", o.SocketGroup)
	}
	fmt.Fprintf(&conf, "credentials = %q   # one file per env.secret variable\n# allow_root = false              # run_as = \"root\" is refused unless true\n", filepath.Join(etc, "credentials"))
	conf.WriteString(bridgeConf.String())

	var trust strings.Builder
	trust.WriteString("# The trust policy (docs/DEPLOYMENT.md, step 8): one [[principal]] per key,\n# with the public line its `prod-write keygen` printed.\n")
	fmt.Fprintf(&trust, "\n[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n", runner.Public().String())
	if bridge != nil {
		fmt.Fprintf(&trust, "\n[[principal]]\nid = \"bridge\"\nroles = [\"bridge\"]\nkey = %q\n", bridge.Public().String())
	}
	agentName := o.Agent
	if agentName == "" {
		agentName = "agent"
	}
	for _, h := range []struct{ id, role, what string }{
		{agentName, "agent", "the agent: it plans"},
		{"OPERATOR", "operator", "an operator: files certainty records"},
		{"APPROVER", "approver", "an approver: approves them"},
	} {
		fmt.Fprintf(&trust, "\n# %s. Its key, made by that account:\n#   prod-write keygen --out ~/.config/prod-write/%s.key\n# [[principal]]\n# id = %q\n# roles = [%q]\n# key = \"ed25519:...\"\n", h.what, strings.ToLower(h.id), h.id, h.role)
	}

	l.Files = append(l.Files,
		provision.File{Path: filepath.Join(etc, config.FileName), Data: []byte(conf.String()), Owner: provision.Root, Mode: 0o644},
		provision.File{Path: filepath.Join(etc, "trust.toml"), Data: []byte(trust.String()), Owner: provision.Root, Mode: 0o644},
	)
	var agentConfig string
	if o.Agent != "" {
		cfgDir := filepath.Join(agentHome, ".config")
		l.Dirs = append(l.Dirs,
			provision.Dir{Path: cfgDir, Owner: agent, Mode: 0o700},
			provision.Dir{Path: filepath.Join(cfgDir, "prod-write"), Owner: agent, Mode: 0o700},
		)
		agentConfig = filepath.Join(cfgDir, "prod-write", config.FileName)
		l.Files = append(l.Files, provision.File{Path: agentConfig, Data: fmt.Appendf(nil, "[service]\nsocket = %q\n", o.Socket), Owner: agent, Mode: 0o644})
	}
	w := &provision.Writer{Root: o.Root}
	if o.Agent != "" {
		// Only a home that exists: setup makes none, and one it made
		// would be root's.
		if ok, err := w.Exists(agentHome); err != nil {
			return &localapi.DataError{Err: err}
		} else if !ok {
			return &localapi.DataError{Err: fmt.Errorf("the agent %s's home %s does not exist: create the account with its home (useradd --create-home), name it with --agent-home, or give --agent \"\"", o.Agent, agentHome)}
		}
	}
	if err := w.Write(l); err != nil {
		var exists *provision.ExistsError
		var unsafe *provision.UnsafeError
		if errors.As(err, &exists) || errors.As(err, &unsafe) {
			return &localapi.DataError{Err: err}
		}
		return err
	}
	return setupPrint(o, l, runner, bridge, agentConfig)
}

func setupPrint(o *SetupServiceOptions, l provision.Layout, runner, bridge *keys.Private, agentConfig string) error {
	out := o.F.IO.Out
	type written struct {
		Path  string `json:"path"`
		Owner string `json:"owner"`
		Mode  string `json:"mode"`
	}
	var all []written
	for _, d := range l.Dirs {
		all = append(all, written{d.Path + "/", d.Owner.Name, fmt.Sprintf("%04o", d.Mode.Perm())})
	}
	for _, f := range l.Files {
		all = append(all, written{f.Path, f.Owner.Name, fmt.Sprintf("%04o", f.Mode.Perm())})
	}
	trust := filepath.Join(o.Etc, "trust.toml")
	next := []string{
		"each human (and the agent) makes a key as itself: prod-write keygen --out ~/.config/prod-write/NAME.key",
		fmt.Sprintf("put each printed public key in %s, in the commented [[principal]] places", trust),
		fmt.Sprintf("add operations to %s (docs/CONFIG.md), each env.secret variable a file in %s (%s 0600)", filepath.Join(o.Etc, "operations"), filepath.Join(o.Etc, "credentials"), o.User),
		"start the service: the systemd units, or a run script (docs/DEPLOYMENT.md)",
		fmt.Sprintf("check it: prod-write doctor --config %s --as %s", filepath.Join(o.Etc, config.FileName), setupOr(o.Agent, "agent")),
	}
	if agentConfig != "" {
		next = append(next, fmt.Sprintf("in the agent's environment: PROD_WRITE_CONFIG=%s PROD_WRITE_KEY=%s", agentConfig, filepath.Join(filepath.Dir(agentConfig), o.Agent+".key")))
	}
	doc := map[string]any{"root": o.Root, "written": all, "runner_key": runner.Public().String(), "next_steps": next}
	if bridge != nil {
		doc["bridge_key"] = bridge.Public().String()
	}
	if o.F.JSON {
		return printDoc(out, doc)
	}
	if o.Root != "/" {
		fmt.Fprintf(out, "wrote, below %s:\n", o.Root)
	} else {
		fmt.Fprintln(out, "wrote:")
	}
	for _, w := range all {
		fmt.Fprintf(out, "  %-60s %s %s\n", w.Path, w.Owner, w.Mode)
	}
	fmt.Fprintf(out, "runner key: %s\n", runner.Public().String())
	if bridge != nil {
		fmt.Fprintf(out, "bridge key: %s\n", bridge.Public().String())
	}
	fmt.Fprintln(out, "next:")
	for i, n := range next {
		fmt.Fprintf(out, "  %d. %s\n", i+1, n)
	}
	return nil
}

func setupOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
