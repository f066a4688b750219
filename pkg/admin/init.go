package admin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// InitRequest is init's: the directory to write (Dir), whether to make
// the demo cast's keys (Demo), and where the state and the example
// operations' production directory go when not under Dir (State, Srv),
// as docs/DEPLOYMENT.md lays a service host out.
type InitRequest struct {
	Dir   string
	Demo  bool
	State string
	Srv   string
}

// InitResult is what init wrote, as `init --json` prints it (its fields
// in the order the document has always had them).
type InitResult struct {
	// Dir is the directory, absolute; Files are the files written, and
	// each key's Path, relative to it.
	Dir           string    `json:"dir"`
	Files         []string  `json:"files"`
	FormatVersion int       `json:"format_version"`
	Keys          []InitKey `json:"keys"`
	// State is "state" (Dir/state) or the absolute state directory.
	State string `json:"state"`
}

// InitKey is a demo key init made.
type InitKey struct {
	Principal string   `json:"principal"`
	Roles     []string `json:"roles"`
	Path      string   `json:"path"`
	PublicKey string   `json:"public_key"`
	KeyID     string   `json:"key_id"`
}

// DemoCast is who init --demo makes keys for, with their roles (comma
// separated). smith also approves, so the demo can show that a filer cannot
// approve its own record.
var DemoCast = []struct{ ID, Role string }{
	{"agent", "agent"}, {"smith", "operator,approver"}, {"alice", "approver"}, {"bob", "approver"}, {"gera", "gera"}, {"runner", "runner"},
}

const configTemplate = `# prod-write configuration. Relative paths are relative to this file.
registry = "operations"      # directory of operation files
trust = "trust.toml"         # the trust policy
state = %q              # plans, evidence, consumption and the receipt journal
# Programs resolve only on this path, never on the caller's PATH.
secure_path = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
%s
[store]
backend = "embedded"
`

const opsTemplate = `# Install a reviewed config file for a service: a real write through a real
# program, approved per invocation.
[[operation]]
name = "config-push"
description = "Install a reviewed config file for a service"
mutating = true
program = "install"
args = ["-m", "0644", "{file.config}", "%[1]s/{target}/{param.service}.toml"]
targets = ["staging", "production"]
timeout = "2m"

[operation.params.service]
description = "the service whose config is installed"
pattern = "^[a-z][a-z0-9-]{0,30}$"

[operation.files.config]
description = "the reviewed config file"
max_size = "1MiB"

[operation.env]
pass = ["AWS_REGION"]
secret = ["DEPLOY_TOKEN"]
set = { APP_ENV = "{target}" }

[operation.approval]
paths = ["gera", "record+approvals"]
approvers = 1
ttl = "1h"

# Read-only: needs no approval, still leaves a receipt.
[[operation]]
name = "list-configs"
description = "List the installed config files of a target"
mutating = false
program = "ls"
args = ["-l", "%[1]s/{target}"]
targets = ["staging", "production"]
timeout = "30s"
`

// Init writes a starting configuration, registry, trust policy and state
// directory into req.Dir. It never overwrites: if any file it would write
// exists, it writes nothing and says which.
func Init(req InitRequest) (*InitResult, error) {
	dir, err := filepath.Abs(req.Dir)
	if err != nil {
		return nil, err
	}
	srv := filepath.Join(dir, "srv")
	if req.Srv != "" {
		if srv, err = filepath.Abs(req.Srv); err != nil {
			return nil, err
		}
	}
	state, stateName := filepath.Join(dir, "state"), "state"
	if req.State != "" {
		if state, err = filepath.Abs(req.State); err != nil {
			return nil, err
		}
		stateName = state
	}
	runner := "# runner_key = \"/etc/prod-write/runner.key\"   # this host's key, role runner\n"
	if req.Demo {
		runner = "runner_key = \"keys/runner.key\"   # this host's key, role runner\n"
	}
	files := []struct {
		path string
		data string
	}{
		{filepath.Join(dir, config.FileName), fmt.Sprintf(configTemplate, stateName, runner)},
		{filepath.Join(dir, "operations", "config.toml"), fmt.Sprintf(opsTemplate, srv)},
	}
	var keyFiles []string
	if req.Demo {
		for _, c := range DemoCast {
			keyFiles = append(keyFiles, filepath.Join(dir, "keys", c.ID+".key"))
		}
	}
	trustPath := filepath.Join(dir, "trust.toml")
	var exists []string
	for _, p := range append(append([]string{trustPath}, keyFiles...), files[0].path, files[1].path) {
		if _, err := os.Lstat(p); err == nil {
			exists = append(exists, p)
		}
	}
	if len(exists) > 0 {
		return nil, &config.Error{Msg: fmt.Sprintf("init never overwrites, and these exist: %s", strings.Join(exists, ", "))}
	}
	for _, d := range []string{dir, filepath.Join(dir, "operations"), srv, filepath.Join(srv, "staging"), filepath.Join(srv, "production")} {
		if err := durable.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// The state's directories exist, durably, before any run relies on an
	// entry in them.
	for _, d := range []string{"", "store/plans", "store/evidence", "store/consumed", "journal"} {
		if err := durable.MkdirAll(filepath.Join(state, d), 0o700); err != nil {
			return nil, err
		}
	}
	res := &InitResult{Dir: dir, FormatVersion: localapi.FormatVersion, Keys: []InitKey{}, State: stateName}
	trust := "# The trust policy: who may act, in which roles, with which keys.\n# Add principals as printed by `prod-write keygen`.\n"
	if req.Demo {
		if err := durable.MkdirAll(filepath.Join(dir, "keys"), 0o700); err != nil {
			return nil, err
		}
		for i, c := range DemoCast {
			k, err := keys.Generate()
			if err != nil {
				return nil, err
			}
			if err := k.WriteNew(keyFiles[i]); err != nil {
				return nil, fmt.Errorf("writing demo key: %w", err)
			}
			roles := strings.Split(c.Role, ",")
			quoted := make([]string, len(roles))
			for i, r := range roles {
				quoted[i] = fmt.Sprintf("%q", r)
			}
			trust += fmt.Sprintf("\n[[principal]]\nid = %q\nroles = [%s]\nkey = %q\n", c.ID, strings.Join(quoted, ", "), k.Public().String())
			res.Keys = append(res.Keys, InitKey{Principal: c.ID, Roles: roles, Path: rel(dir, keyFiles[i]), PublicKey: k.Public().String(), KeyID: k.Public().ID()})
			if slices.Contains(roles, "approver") {
				// No GitHub mapping: the bridge maps an account by its
				// numeric id, which only the real account has; a demo
				// login would be a stranger's on github.com.
				trust += fmt.Sprintf("slack = %q\n# github = \"LOGIN\"   # and its numeric id: gh api users/LOGIN --jq .id\n# github_id = 0\n", "U"+strings.ToUpper(c.ID))
			}
		}
	}
	files = append(files, struct {
		path string
		data string
	}{trustPath, trust})
	for _, fl := range files {
		if err := durable.CreateExclusive(fl.path, []byte(fl.data), 0o644, true); err != nil {
			if errors.Is(err, os.ErrExist) {
				return nil, &config.Error{Msg: fmt.Sprintf("init never overwrites, and %s exists", fl.path)}
			}
			return nil, err
		}
		res.Files = append(res.Files, rel(dir, fl.path))
	}
	return res, nil
}

func rel(base, p string) string {
	if r, err := filepath.Rel(base, p); err == nil {
		return r
	}
	return p
}
