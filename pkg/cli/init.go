package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// InitOptions are init's inputs.
type InitOptions struct {
	F    *Factory `json:"-"`
	Dir  string
	Demo bool
	// State and Srv, when set, put the state directory and the example
	// operations' production directory outside Dir, as docs/DEPLOYMENT.md
	// lays a service host out (/var/lib/prod-write, /srv/app), rather
	// than under /etc/prod-write.
	State string
	Srv   string
}

// DemoCast is who init --demo makes keys for, with their roles (comma
// separated). smith also approves, so the demo can show that a filer cannot
// approve its own record.
var DemoCast = []struct{ ID, Role string }{
	{"agent", "agent"}, {"smith", "operator,approver"}, {"alice", "approver"}, {"bob", "approver"}, {"gera", "gera"}, {"runner", "runner"},
}

// NewCmdInit builds `init`.
func NewCmdInit(f *Factory, runF func(*InitOptions) error) *cobra.Command {
	opts := &InitOptions{F: f}
	cmd := &cobra.Command{
		Use:   "init [DIR]",
		Short: "Write a starting configuration, registry, trust policy and state directory",
		Long: `init writes prod-write.toml, operations/ with example operations, trust.toml
and the state directory into DIR (default: the working directory). It never
overwrites: if any of those files exists, it writes nothing.

With --demo it also makes keys for a demo cast in DIR/keys (agent, smith,
alice, bob, gera, runner) and lists them in trust.toml.

The state goes in DIR/state and the example operations write under DIR/srv
unless --state and --srv say otherwise: on a service host, as
docs/DEPLOYMENT.md lays it out, the policy is root's in /etc/prod-write and
the state the service's in /var/lib/prod-write (chown it to the service
account afterwards).`,
		Example: `  prod-write init --demo /tmp/pw
  prod-write init --state /var/lib/prod-write --srv /srv/app /etc/prod-write`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dir = "."
			if len(args) == 1 {
				opts.Dir = args[0]
			}
			if runF != nil {
				return runF(opts)
			}
			return initRun(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Demo, "demo", false, "also make keys for a demo cast")
	cmd.Flags().StringVar(&opts.State, "state", "", "the state `DIR` (default: DIR/state)")
	cmd.Flags().StringVar(&opts.Srv, "srv", "", "the `DIR` the example operations write under (default: DIR/srv)")
	return cmd
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

func initRun(o *InitOptions) error {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	srv := filepath.Join(dir, "srv")
	if o.Srv != "" {
		if srv, err = filepath.Abs(o.Srv); err != nil {
			return err
		}
	}
	state, stateName := filepath.Join(dir, "state"), "state"
	if o.State != "" {
		if state, err = filepath.Abs(o.State); err != nil {
			return err
		}
		stateName = state
	}
	runner := "# runner_key = \"/etc/prod-write/runner.key\"   # this host's key, role runner\n"
	if o.Demo {
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
	if o.Demo {
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
		return &config.Error{Msg: fmt.Sprintf("init never overwrites, and these exist: %s", strings.Join(exists, ", "))}
	}
	for _, d := range []string{dir, filepath.Join(dir, "operations"), srv, filepath.Join(srv, "staging"), filepath.Join(srv, "production")} {
		if err := durable.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The state's directories exist, durably, before any run relies on an
	// entry in them.
	for _, d := range []string{"", "store/plans", "store/evidence", "store/consumed", "journal"} {
		if err := durable.MkdirAll(filepath.Join(state, d), 0o700); err != nil {
			return err
		}
	}
	var madeKeys []initKey
	trust := "# The trust policy: who may act, in which roles, with which keys.\n# Add principals as printed by `prod-write keygen`.\n"
	if o.Demo {
		if err := durable.MkdirAll(filepath.Join(dir, "keys"), 0o700); err != nil {
			return err
		}
		for i, c := range DemoCast {
			k, err := keys.Generate()
			if err != nil {
				return err
			}
			if err := k.WriteNew(keyFiles[i]); err != nil {
				return fmt.Errorf("writing demo key: %w", err)
			}
			roles := strings.Split(c.Role, ",")
			quoted := make([]string, len(roles))
			for i, r := range roles {
				quoted[i] = fmt.Sprintf("%q", r)
			}
			trust += fmt.Sprintf("\n[[principal]]\nid = %q\nroles = [%s]\nkey = %q\n", c.ID, strings.Join(quoted, ", "), k.Public().String())
			madeKeys = append(madeKeys, initKey{Principal: c.ID, Roles: roles, Path: rel(dir, keyFiles[i]), PublicKey: k.Public().String(), KeyID: k.Public().ID()})
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
				return &config.Error{Msg: fmt.Sprintf("init never overwrites, and %s exists", fl.path)}
			}
			return err
		}
	}
	w := o.F.IO.Out
	if o.F.JSON {
		var written []string
		for _, fl := range files {
			written = append(written, rel(dir, fl.path))
		}
		return printDoc(w, map[string]any{"dir": dir, "files": written, "keys": localapi.NonNil(madeKeys), "state": stateName})
	}
	fmt.Fprintf(w, "wrote %s\n", dir)
	for _, fl := range files {
		fmt.Fprintf(w, "  %s\n", rel(dir, fl.path))
	}
	for _, k := range keyFiles {
		fmt.Fprintf(w, "  %s (0600)\n", rel(dir, k))
	}
	if o.State != "" {
		fmt.Fprintf(w, "  %s/ (0700)\n", state)
	} else {
		fmt.Fprintf(w, "  state/ (0700)\n")
	}
	return nil
}

// initKey is a demo key as `init --demo --json` reports it.
type initKey struct {
	Principal string   `json:"principal"`
	Roles     []string `json:"roles"`
	Path      string   `json:"path"`
	PublicKey string   `json:"public_key"`
	KeyID     string   `json:"key_id"`
}

func rel(base, p string) string {
	if r, err := filepath.Rel(base, p); err == nil {
		return r
	}
	return p
}

// KeygenOptions are keygen's inputs.
type KeygenOptions struct {
	F   *Factory `json:"-"`
	Out string
}

// NewCmdKeygen builds `keygen`.
func NewCmdKeygen(f *Factory, runF func(*KeygenOptions) error) *cobra.Command {
	opts := &KeygenOptions{F: f}
	cmd := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Make a new ed25519 key and print its public half",
		Long: `keygen writes a new ed25519 private key to FILE with mode 0600, refusing to
overwrite anything, and prints the public key on one line in the form
trust.toml takes.`,
		Example: `  prod-write keygen --out ~/.config/prod-write/alice.key
  ed25519:3q2+7w...`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Out == "" {
				return &localapi.UsageError{Msg: "keygen needs --out FILE"}
			}
			if runF != nil {
				return runF(opts)
			}
			return keygenRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Out, "out", "", "where to write the private key (mode 0600, never overwritten)")
	return cmd
}

func keygenRun(o *KeygenOptions) error {
	k, err := keys.Generate()
	if err != nil {
		return err
	}
	if err := k.WriteNew(o.Out); err != nil {
		if errors.Is(err, os.ErrExist) {
			return &localapi.DataError{Err: fmt.Errorf("%s exists; keygen never overwrites a key", o.Out)}
		}
		return fmt.Errorf("writing key: %w", err)
	}
	if o.F.JSON {
		return printDoc(o.F.IO.Out, map[string]any{"path": o.Out, "public_key": k.Public().String(), "key_id": k.Public().ID()})
	}
	fmt.Fprintln(o.F.IO.Out, k.Public().String())
	return nil
}
