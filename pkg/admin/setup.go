package admin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/provision"
)

// SetupServiceRequest is `setup service`'s: the runner service's layout
// of docs/DEPLOYMENT.md, written below Root.
type SetupServiceRequest struct {
	Root        string // a prefix every path is written under
	Etc         string
	State       string
	Socket      string
	User        string // the service account
	SocketGroup string
	Agent       string // the agent's account; "" writes no client configuration
	AgentHome   string // its home; "" is the account's
	// Bridge secret files ("-": Stdin), by their [bridge] key.
	SlackSigningSecret, SlackBotToken, GitHubToken, GitHubWebhookSecret string
	// Stdin is where a secret named "-" is read from.
	Stdin io.Reader

	// LookupUser and LookupGroup find accounts; nil means os/user's.
	LookupUser  func(string) (*user.User, error)
	LookupGroup func(string) (*user.Group, error)
}

// SetupServiceResult is what setup wrote, as `setup service --json`
// prints it (its fields in the order the document has always had them).
type SetupServiceResult struct {
	BridgeKey     string    `json:"bridge_key,omitempty"`
	FormatVersion int       `json:"format_version"`
	NextSteps     []string  `json:"next_steps"`
	Root          string    `json:"root"`
	RunnerKey     string    `json:"runner_key"`
	Written       []Written `json:"written"`
}

// Written is one directory (its path ends in "/") or file setup wrote.
type Written struct {
	Path  string `json:"path"`
	Owner string `json:"owner"`
	Mode  string `json:"mode"`
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
func readSecret(stdin io.Reader, flag, from string) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	if from == "-" {
		if stdin == nil {
			return nil, &localapi.UsageError{Msg: fmt.Sprintf("--%s -: no standard input", flag)}
		}
		b, err = io.ReadAll(io.LimitReader(stdin, 64<<10))
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

// SetupService writes the runner service's layout: root's policy in Etc,
// the service account's state and keys in State, and the agent's client
// configuration in its home. It never overwrites, follows no symbolic
// link in a directory another account may write, and creates no account
// (pkg/provision).
func SetupService(req SetupServiceRequest) (*SetupServiceResult, error) {
	lookupUser, lookupGroup := req.LookupUser, req.LookupGroup
	if lookupUser == nil {
		lookupUser = user.Lookup
	}
	if lookupGroup == nil {
		lookupGroup = user.LookupGroup
	}
	for _, p := range []struct{ flag, v string }{{"etc", req.Etc}, {"state", req.State}, {"socket", req.Socket}} {
		if !filepath.IsAbs(p.v) || filepath.Clean(p.v) != p.v {
			return nil, &localapi.UsageError{Msg: fmt.Sprintf("--%s %q: want a clean absolute path", p.flag, p.v)}
		}
	}
	svc, _, err := setupAccount(lookupUser, req.User, "the service account, --user")
	if err != nil {
		return nil, err
	}
	if svc.UID == 0 {
		return nil, &localapi.DataError{Err: errors.New("--user root: the service account must not be root (docs/DEPLOYMENT.md)")}
	}
	if req.SocketGroup != "" {
		if _, err := lookupGroup(req.SocketGroup); err != nil {
			var unknown user.UnknownGroupError
			if errors.As(err, &unknown) {
				return nil, &localapi.DataError{Err: fmt.Errorf("no group %q (the callers', --socket-group): create it first (docs/DEPLOYMENT.md, step 1)", req.SocketGroup)}
			}
			return nil, fmt.Errorf("looking up group %s: %w", req.SocketGroup, err)
		}
	}
	var agent provision.Account
	var agentHome string
	if req.Agent != "" {
		if agent, agentHome, err = setupAccount(lookupUser, req.Agent, "the agent, --agent"); err != nil {
			return nil, err
		}
		if req.AgentHome != "" {
			agentHome = req.AgentHome
		}
		if !filepath.IsAbs(agentHome) || filepath.Clean(agentHome) != agentHome || agentHome == "/" {
			return nil, &localapi.DataError{Err: fmt.Errorf("the agent %s has home %q: setup writes its client configuration there, so it must be a directory of its own", req.Agent, agentHome)}
		}
	}
	secrets := []struct{ flag, key, name, from string }{
		{"slack-signing-secret", "slack_signing_secret_file", "slack-signing-secret", req.SlackSigningSecret},
		{"slack-bot-token", "slack_bot_token_file", "slack-bot-token", req.SlackBotToken},
		{"github-token", "github_token_file", "github-token", req.GitHubToken},
		{"github-webhook-secret", "github_webhook_secret_file", "github-webhook-secret", req.GitHubWebhookSecret},
	}
	stdin := 0
	for _, s := range secrets {
		if s.from == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return nil, &localapi.UsageError{Msg: "only one bridge secret can come from standard input"}
	}

	etc, state := req.Etc, req.State
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
		return nil, err
	}
	runnerKey := filepath.Join(state, "runner.key")
	l.Files = append(l.Files, provision.File{Path: runnerKey, Data: runner.MarshalPEM(), Owner: svc, Mode: 0o600})

	var bridgeConf strings.Builder
	var bridge *keys.Private
	for _, s := range secrets {
		if s.from == "" {
			continue
		}
		data, err := readSecret(req.Stdin, s.flag, s.from)
		if err != nil {
			return nil, err
		}
		if bridge == nil {
			if bridge, err = keys.Generate(); err != nil {
				return nil, err
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
	fmt.Fprintf(&conf, "# prod-write's service configuration (docs/DEPLOYMENT.md), written by\n# `prod-write setup service`. The registry and trust policy are\n# operations/ and trust.toml beside it.\nstate = %q\nrunner_key = %q\n\n[service]\nsocket = %q\n", state, runnerKey, req.Socket)
	if req.SocketGroup != "" {
		fmt.Fprintf(&conf, "socket_group = %q\n", req.SocketGroup)
	}
	fmt.Fprintf(&conf, "credentials = %q   # one file per env.secret variable\n# allow_root = false              # run_as = \"root\" is refused unless true\n", filepath.Join(etc, "credentials"))
	conf.WriteString(bridgeConf.String())

	var trust strings.Builder
	trust.WriteString("# The trust policy (docs/DEPLOYMENT.md, step 8): one [[principal]] per key,\n# with the public line its `prod-write keygen` printed.\n")
	fmt.Fprintf(&trust, "\n[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n", runner.Public().String())
	if bridge != nil {
		fmt.Fprintf(&trust, "\n[[principal]]\nid = \"bridge\"\nroles = [\"bridge\"]\nkey = %q\n", bridge.Public().String())
	}
	agentName := req.Agent
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
	if req.Agent != "" {
		cfgDir := filepath.Join(agentHome, ".config")
		l.Dirs = append(l.Dirs,
			provision.Dir{Path: cfgDir, Owner: agent, Mode: 0o700},
			provision.Dir{Path: filepath.Join(cfgDir, "prod-write"), Owner: agent, Mode: 0o700},
		)
		agentConfig = filepath.Join(cfgDir, "prod-write", config.FileName)
		l.Files = append(l.Files, provision.File{Path: agentConfig, Data: fmt.Appendf(nil, "[service]\nsocket = %q\n", req.Socket), Owner: agent, Mode: 0o644})
	}
	w := &provision.Writer{Root: req.Root}
	if req.Agent != "" {
		// Only a home that exists: setup makes none, and one it made
		// would be root's.
		if ok, err := w.Exists(agentHome); err != nil {
			return nil, &localapi.DataError{Err: err}
		} else if !ok {
			return nil, &localapi.DataError{Err: fmt.Errorf("the agent %s's home %s does not exist: create the account with its home (useradd --create-home), name it with --agent-home, or give --agent \"\"", req.Agent, agentHome)}
		}
	}
	if err := w.Write(l); err != nil {
		var exists *provision.ExistsError
		var unsafe *provision.UnsafeError
		if errors.As(err, &exists) || errors.As(err, &unsafe) {
			return nil, &localapi.DataError{Err: err}
		}
		return nil, err
	}
	return setupResult(req, l, runner, bridge, agentConfig), nil
}

func setupResult(req SetupServiceRequest, l provision.Layout, runner, bridge *keys.Private, agentConfig string) *SetupServiceResult {
	r := &SetupServiceResult{FormatVersion: localapi.FormatVersion, Root: req.Root, RunnerKey: runner.Public().String()}
	for _, d := range l.Dirs {
		r.Written = append(r.Written, Written{d.Path + "/", d.Owner.Name, fmt.Sprintf("%04o", d.Mode.Perm())})
	}
	for _, f := range l.Files {
		r.Written = append(r.Written, Written{f.Path, f.Owner.Name, fmt.Sprintf("%04o", f.Mode.Perm())})
	}
	if bridge != nil {
		r.BridgeKey = bridge.Public().String()
	}
	agent := req.Agent
	if agent == "" {
		agent = "agent"
	}
	r.NextSteps = []string{
		"each human (and the agent) makes a key as itself: prod-write keygen --out ~/.config/prod-write/NAME.key",
		fmt.Sprintf("put each printed public key in %s, in the commented [[principal]] places", filepath.Join(req.Etc, "trust.toml")),
		fmt.Sprintf("add operations to %s (docs/CONFIG.md), each env.secret variable a file in %s (%s 0600)", filepath.Join(req.Etc, "operations"), filepath.Join(req.Etc, "credentials"), req.User),
		fmt.Sprintf("start the history replay judges runs by, and record it again after every later change to the trust policy or the registry, before the reload (docs/DEPLOYMENT.md, \"Changing the policy\"): prod-write history record --config %s", filepath.Join(req.Etc, config.FileName)),
		"start the service: the systemd units, or a run script (docs/DEPLOYMENT.md)",
		fmt.Sprintf("check it: prod-write doctor --config %s --as %s", filepath.Join(req.Etc, config.FileName), agent),
	}
	if agentConfig != "" {
		r.NextSteps = append(r.NextSteps, fmt.Sprintf("in the agent's environment: PROD_WRITE_CONFIG=%s PROD_WRITE_KEY=%s", agentConfig, filepath.Join(filepath.Dir(agentConfig), req.Agent+".key")))
	}
	return r
}
