// Package config holds prod-write.toml: where the registry, trust policy,
// state and runner key are, which programs may run (the secure path), which
// backends and bridges are on, and the pins that fix the policy a run is
// judged by.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prod-write/prod-write/pkg/tomlpos"
	"github.com/prod-write/prod-write/pkg/units"
)

// FileName is the configuration file looked for in the working directory
// and its parents.
const FileName = "prod-write.toml"

// Config is prod-write.toml. Relative paths are relative to the file's
// directory.
type Config struct {
	Registry   string   `toml:"registry"`
	Trust      string   `toml:"trust"`
	State      string   `toml:"state"`
	SecurePath []string `toml:"secure_path"`
	RunnerKey  string   `toml:"runner_key"`
	Host       string   `toml:"host"`
	Store      Store    `toml:"store"`
	Archive    Archive  `toml:"archive"`
	Pin        Pin      `toml:"pin"`
	Bridge     Bridge   `toml:"bridge"`
	Service    Service  `toml:"service"`
	Requests   Requests `toml:"requests"`
	Log        Log      `toml:"log"`
	// Witnesses are where the service sends the receipts log's
	// checkpoints ([[witness]], ADR 0044): operational, each
	// named as its key is in trust.toml's [[witness]], which is trust.
	Witnesses []Witness `toml:"witness"`

	// Path is the file this was read from; Dir its directory.
	Path string `toml:"-"`
	Dir  string `toml:"-"`
}

// Store chooses the backend for plans, evidence and consumption.
type Store struct {
	Backend  string `toml:"backend"` // "embedded" (default) or "dynamodb"
	Table    string `toml:"table"`
	Region   string `toml:"region"`
	Endpoint string `toml:"endpoint"`
}

// Archive is the S3 receipt archive.
type Archive struct {
	Bucket   string `toml:"bucket"`
	Prefix   string `toml:"prefix"`
	Region   string `toml:"region"`
	Endpoint string `toml:"endpoint"`
	// LockMode is the object-lock mode of each receipt (GOVERNANCE or
	// COMPLIANCE), with LockDays of retention; empty leaves the bucket's
	// default retention.
	LockMode string `toml:"lock_mode"`
	LockDays int    `toml:"lock_days"`
}

// Pin fixes the trust policy and registry a run may be judged by.
type Pin struct {
	Trust    string `toml:"trust"`
	Registry string `toml:"registry"`
}

// Bridge configures Trinity's bridges.
type Bridge struct {
	Listen       string `toml:"listen"`
	Key          string `toml:"key"`
	SlackChannel string `toml:"slack_channel"`
	SlackAPI     string `toml:"slack_api"`
	GitHubRepo   string `toml:"github_repo"`
	GitHubAPI    string `toml:"github_api"`
	GitHubPR     int    `toml:"github_pr"`

	// Secrets come from the environment (PROD_WRITE_SLACK_SIGNING_SECRET,
	// PROD_WRITE_SLACK_BOT_TOKEN, PROD_WRITE_GITHUB_TOKEN) or from these
	// files, which only their owner may read; never from a flag. Relative
	// paths are relative to this file (see docs/BRIDGES.md).
	SlackSigningSecretFile string `toml:"slack_signing_secret_file"`
	SlackBotTokenFile      string `toml:"slack_bot_token_file"`
	GitHubTokenFile        string `toml:"github_token_file"`
	// SlackTeam, when set, is the only Slack workspace (team id) whose
	// clicks count.
	SlackTeam string `toml:"slack_team"`
	// GitHubPoll is how often bridge serve reads decision comments, as a
	// Go duration ("30s" when empty).
	GitHubPoll string `toml:"github_poll"`
	// GitHubWebhookSecretFile, when set, turns on GitHub's webhooks at
	// /github/webhook on Listen, verified with the secret in this file
	// (only from a file, which only its owner may read).
	GitHubWebhookSecretFile string `toml:"github_webhook_secret_file"`
	// DiffRoots are the directories under which the bridges may read a
	// file an operation's diff_against names, to show approvers a diff
	// (docs/BRIDGES.md, "What approvers see"). Absolute; none means no
	// diff is ever shown.
	DiffRoots []string `toml:"diff_roots"`
	// PageListen, when set, is the address the approval page is served
	// on (behind TLS termination at trust.toml's [passkey] origin,
	// docs/adr/0048-approval-page.md).
	PageListen string `toml:"page_listen"`
}

// Requests configures the decision requests of plans that need a human
// (docs/adr/0020-decision-requests.md): how long one stays open, when the
// bridges remind the approvers asked and when they escalate. Durations are
// Go durations; empty means the default, "0" turns reminders or escalation
// off.
type Requests struct {
	TTL           string `toml:"ttl"`
	RemindAfter   string `toml:"remind_after"`
	EscalateAfter string `toml:"escalate_after"`
	// EscalateSlackChannel is where the Slack bridge posts the decision
	// again when nobody answered; EscalateGitHub is who (an @team or
	// @login) the GitHub bridge mentions.
	EscalateSlackChannel string `toml:"escalate_slack_channel"`
	EscalateGitHub       string `toml:"escalate_github"`
	// CheckEvery is how often bridge serve looks at open requests.
	CheckEvery string `toml:"check_every"`
}

// Log configures the decision log (docs/DECISIONS.md,
// docs/adr/0026-decision-log.md).
type Log struct {
	// Decisions is where every run attempt's decision is logged: a file
	// path, or "-" for the standard output of `prod-write serve`. Off when
	// empty.
	Decisions string `toml:"decisions"`
	// DecisionsMaxSize is the size at which the file is rotated;
	// DecisionsKeep how many rotated files are kept.
	DecisionsMaxSize units.Size `toml:"decisions_max_size"`
	DecisionsKeep    *int       `toml:"decisions_keep"`
}

// Defaults of [log].
const (
	DefaultDecisionsMaxSize = 10 << 20
	DefaultDecisionsKeep    = 5
	// MaxDecisionsKeep bounds decisions_keep, so the cap stays a cap.
	MaxDecisionsKeep = 100
	// MinDecisionsMaxSize is the smallest decisions_max_size: a few of
	// the longest lines (pkg/decisionlog.MinSize).
	MinDecisionsMaxSize = 16 << 10
)

// Service configures the runner service of docs/DESIGN.md §13
// (docs/adr/0011-runner-service.md). On a caller's host only Socket is
// read: a configuration that names a socket makes every command that acts
// on plans, evidence or receipts a client of the service there.
type Service struct {
	// Socket is the Unix socket `serve` listens on and clients connect to.
	Socket string `toml:"socket"`
	// Credentials is the service-owned directory of production secrets,
	// one file per secret named as the variable (systemd's LoadCredential
	// layout). Empty means $CREDENTIALS_DIRECTORY of the service's own
	// environment, which systemd sets.
	Credentials string `toml:"credentials"`
	// Secrets, when set, is where production secrets come from instead of
	// the credentials directory: "ssm:/PREFIX/" reads secret NAME from the
	// SSM Parameter Store parameter /PREFIX/NAME (decrypted), with
	// SecretsRegion and, for tests, SecretsEndpoint.
	Secrets         string `toml:"secrets"`
	SecretsRegion   string `toml:"secrets_region"`
	SecretsEndpoint string `toml:"secrets_endpoint"`
	// AllowRoot lets an operation's run_as be root. Off, such an
	// operation is refused under the service.
	AllowRoot bool `toml:"allow_root"`
	// AllowSharedAccount lets run_as be the caller's or the service's own
	// account: a one-account setup (a demo, a test) that says explicitly
	// it has no separation. doctor reports it.
	AllowSharedAccount bool `toml:"allow_shared_account"`
	// SocketMode is the socket file's mode, as an octal string ("0660"
	// when empty: the service's group, or SocketGroup, may connect; who
	// may act is still decided by signatures).
	SocketMode string `toml:"socket_mode"`
	// SocketGroup is the group the socket is given (the callers'), by
	// name; empty leaves the service's own.
	SocketGroup string `toml:"socket_group"`
	// MCPListen is the address MCP over Streamable HTTP is served on
	// (off when empty); MCPTokens the file of its hashed bearer tokens.
	MCPListen string `toml:"mcp_listen"`
	MCPTokens string `toml:"mcp_tokens"`
	// MCPKeys is the service-owned directory of the keys the hosted
	// principals sign plans with, one PRINCIPAL.key each; a token whose
	// principal has none can read but not plan.
	MCPKeys string `toml:"mcp_keys"`
	// MCPCwd is the working directory of the plans MCP over HTTP makes
	// for operations that declare none: a hosted agent hands over no
	// directory. Empty: such operations are refused over HTTP.
	MCPCwd string `toml:"mcp_cwd"`
	// MCPAllowRun offers run to the tokens that allow it.
	MCPAllowRun bool `toml:"mcp_allow_run"`
	// MCPRate and MCPBurst bound each principal's requests over HTTP, all
	// its tokens together: MCPRate a second, in bursts of up to MCPBurst
	// (a token bucket, docs/adr/0046-mcp-http-origin-token-type-limits.md).
	// Zero is the default of MCP over HTTP (10 a second, bursts of 50).
	MCPRate  float64 `toml:"mcp_rate"`
	MCPBurst int     `toml:"mcp_burst"`
	// MCPTLSCert and MCPTLSKey, set together, serve MCP over HTTPS: the
	// PEM certificate chain and its private key, a file only the
	// service's account may read (docs/adr/0047-mcp-http-limits-tls-origin-body.md).
	MCPTLSCert string `toml:"mcp_tls_cert"`
	MCPTLSKey  string `toml:"mcp_tls_key"`
	// WitnessInterval and WitnessEvery are the cadence at which serve
	// sends the head's checkpoint to the [[witness]]es: once new
	// receipts have waited WitnessInterval (a Go duration; empty: a
	// minute), or as soon as WitnessEvery of them are new (0: off).
	WitnessInterval string `toml:"witness_interval"`
	WitnessEvery    int    `toml:"witness_every"`
}

// Witness is a witness the service sends checkpoints to by the C2SP
// tlog-witness protocol.
type Witness struct {
	// Name is the witness's key name: trust.toml's [[witness]] key of
	// that name verifies what it returns.
	Name string `toml:"name"`
	// URL is its tlog-witness URL prefix: checkpoints are posted to
	// URL/add-checkpoint.
	URL string `toml:"url"`
}

// DefaultWitnessInterval is service.witness_interval's default.
const DefaultWitnessInterval = time.Minute

// WitnessIntervalDuration is how long the service lets a new receipt wait before
// it sends the head's checkpoint to the witnesses.
func (s *Service) WitnessIntervalDuration() time.Duration {
	d, err := time.ParseDuration(s.WitnessInterval)
	if err != nil || d <= 0 {
		return DefaultWitnessInterval
	}
	return d
}

func checkWitnesses(path string, ws []Witness, s *Service) error {
	seen := map[string]bool{}
	for i, w := range ws {
		bad := func(format string, args ...any) error {
			return &Error{Path: path, Msg: fmt.Sprintf("witness %d: ", i+1) + fmt.Sprintf(format, args...)}
		}
		if w.Name == "" {
			return bad("name is required: the name of its key in trust.toml's [[witness]]")
		}
		if seen[w.Name] {
			return bad("name %q is already another witness's", w.Name)
		}
		seen[w.Name] = true
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return bad("url %q is not an http(s) URL prefix (https://host[/path], no query)", w.URL)
		}
	}
	if s.WitnessInterval != "" {
		d, err := time.ParseDuration(s.WitnessInterval)
		if err != nil || d < time.Second {
			return &Error{Path: path, Msg: fmt.Sprintf("service.witness_interval %q: want a Go duration of 1s or more", s.WitnessInterval)}
		}
	}
	if s.WitnessEvery < 0 {
		return &Error{Path: path, Msg: fmt.Sprintf("service.witness_every %d: want a number of receipts, 0 (off) or more", s.WitnessEvery)}
	}
	return nil
}

// MaxMCPBurst bounds service.mcp_burst: a burst is a number of requests
// served at once, not a way to turn the limit off.
const MaxMCPBurst = 1 << 20

func (s *Service) check(path string) error {
	// NaN fails every comparison: it is refused with the negative rates.
	if !(s.MCPRate >= 0) || math.IsInf(s.MCPRate, 0) {
		return &Error{Path: path, Msg: fmt.Sprintf("service.mcp_rate %v: want a finite number of requests a second, 0 or more (0 or unset: the default, 10)", s.MCPRate)}
	}
	if s.MCPBurst < 0 || s.MCPBurst > MaxMCPBurst {
		return &Error{Path: path, Msg: fmt.Sprintf("service.mcp_burst %d: want 1 to %d requests (0 or unset: the default, 50)", s.MCPBurst, MaxMCPBurst)}
	}
	if (s.MCPTLSCert == "") != (s.MCPTLSKey == "") {
		return &Error{Path: path, Msg: "service.mcp_tls_cert and service.mcp_tls_key go together: set both to serve MCP over HTTPS, or neither"}
	}
	return nil
}

// DefaultSecurePath is where programs resolve when prod-write.toml names no
// secure_path. It never comes from the caller's PATH.
var DefaultSecurePath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Error is a missing or broken configuration (exit 78).
type Error struct {
	Path string
	Line int
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	loc := e.Path
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.Path, e.Line)
	}
	msg := e.Msg
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if loc == "" {
		return msg
	}
	return loc + ": " + msg
}

func (e *Error) Unwrap() error { return e.Err }

// Find returns the configuration path: explicit if given, else
// $PROD_WRITE_CONFIG, else prod-write.toml in cwd or the nearest parent.
func Find(explicit, env, cwd string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if env != "" {
		return env, nil
	}
	for dir := cwd; ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, FileName)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", &Error{Msg: fmt.Sprintf("no %s in %s or any parent (run `prod-write init`, or pass --config)", FileName, cwd)}
}

// Load reads and checks a configuration file.
func Load(path string) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in the message
		}
		return nil, &Error{Path: path, Msg: "cannot read configuration", Err: err}
	}
	return Parse(abs, data)
}

// Parse decodes configuration data read from path.
func Parse(path string, data []byte) (*Config, error) {
	c := &Config{}
	if err := tomlpos.Decode(data, c); err != nil {
		var te *tomlpos.Error
		if !errors.As(err, &te) {
			return nil, &Error{Path: path, Msg: err.Error()}
		}
		return nil, &Error{Path: path, Line: te.Line, Msg: te.Msg}
	}
	c.Path, c.Dir = path, filepath.Dir(path)
	if c.Registry == "" {
		c.Registry = "operations"
	}
	if c.Trust == "" {
		c.Trust = "trust.toml"
	}
	if c.State == "" {
		c.State = "state"
	}
	if c.SecurePath == nil {
		c.SecurePath = DefaultSecurePath
	}
	for _, d := range c.Bridge.DiffRoots {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" {
			return nil, &Error{Path: path, Msg: fmt.Sprintf("bridge.diff_roots entry %q must be an absolute, clean path other than /", d)}
		}
	}
	for _, d := range c.SecurePath {
		if !filepath.IsAbs(d) {
			return nil, &Error{Path: path, Msg: fmt.Sprintf("secure_path entry %q must be absolute", d)}
		}
	}
	switch c.Store.Backend {
	case "":
		c.Store.Backend = "embedded"
	case "embedded", "dynamodb":
	default:
		return nil, &Error{Path: path, Msg: fmt.Sprintf("store.backend %q: want \"embedded\" or \"dynamodb\"", c.Store.Backend)}
	}
	switch strings.ToUpper(c.Archive.LockMode) {
	case "":
	case "GOVERNANCE", "COMPLIANCE":
		c.Archive.LockMode = strings.ToUpper(c.Archive.LockMode)
		if c.Archive.LockDays < 1 {
			return nil, &Error{Path: path, Msg: "archive.lock_days must be at least 1 when archive.lock_mode is set"}
		}
	default:
		return nil, &Error{Path: path, Msg: fmt.Sprintf("archive.lock_mode %q: want GOVERNANCE or COMPLIANCE", c.Archive.LockMode)}
	}
	if err := c.Log.check(path); err != nil {
		return nil, err
	}
	if err := c.Service.check(path); err != nil {
		return nil, err
	}
	if err := checkWitnesses(path, c.Witnesses, &c.Service); err != nil {
		return nil, err
	}
	for _, p := range []*string{&c.Registry, &c.Trust, &c.State, &c.RunnerKey, &c.Bridge.Key, &c.Service.Socket, &c.Service.Credentials, &c.Service.MCPTokens, &c.Service.MCPKeys, &c.Service.MCPCwd, &c.Service.MCPTLSCert, &c.Service.MCPTLSKey} {
		*p = c.Abs(*p)
	}
	return c, nil
}

func (l *Log) check(path string) error {
	if l.DecisionsMaxSize == 0 {
		l.DecisionsMaxSize = DefaultDecisionsMaxSize
	}
	if l.DecisionsMaxSize < MinDecisionsMaxSize {
		return &Error{Path: path, Msg: fmt.Sprintf("log.decisions_max_size %d: want at least %d bytes (16KiB)", l.DecisionsMaxSize, MinDecisionsMaxSize)}
	}
	if l.DecisionsKeep == nil {
		k := DefaultDecisionsKeep
		l.DecisionsKeep = &k
	}
	if *l.DecisionsKeep < 0 || *l.DecisionsKeep > MaxDecisionsKeep {
		return &Error{Path: path, Msg: fmt.Sprintf("log.decisions_keep %d: want 0 to %d", *l.DecisionsKeep, MaxDecisionsKeep)}
	}
	return nil
}

// DecisionsPath is the decision log file, resolved against the
// configuration's directory; "-" (standard output) and "" (off) are
// returned as they are.
func (c *Config) DecisionsPath() string {
	if c.Log.Decisions == "-" {
		return "-"
	}
	return c.Abs(c.Log.Decisions)
}

// Abs resolves p against the configuration's directory.
func (c *Config) Abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

// StoreDir is the embedded store's root.
func (c *Config) StoreDir() string { return filepath.Join(c.State, "store") }

// HistoryDir is the history beside the trust policy: where `prod-write
// history record` keeps it, the runner service checks what it loads
// against it, and replay looks for it (docs/REPLAY.md, "History").
func (c *Config) HistoryDir() string { return filepath.Join(filepath.Dir(c.Trust), "history") }

// JournalPath is the receipt journal.
func (c *Config) JournalPath() string { return filepath.Join(c.State, "journal", "receipts.jsonl") }
