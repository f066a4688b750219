package localapi

import (
	"fmt"
	"strings"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// LoadConfig finds and parses prod-write.toml as the global flags and
// environment say, once.
func (f *Env) LoadConfig() (*config.Config, error) {
	if f.Call != nil {
		return f.Call.State.Cfg, nil
	}
	if f.Cfg != nil {
		return f.Cfg, nil
	}
	cwd, err := f.Getwd()
	if err != nil {
		return nil, err
	}
	env, _ := f.LookupEnv("PROD_WRITE_CONFIG")
	path, err := config.Find(f.ConfigPath, env, cwd)
	if err != nil {
		return nil, err
	}
	if f.Cfg, err = config.Load(path); err != nil {
		return nil, err
	}
	return f.Cfg, nil
}

// Config loads prod-write.toml for a command that acts here, handing the
// command over to prod-write-net when it needs backends this build lacks.
func (f *Env) Config() (*config.Config, error) {
	c, err := f.LoadConfig()
	if err != nil || f.Call != nil {
		return c, err
	}
	if why := needsAWS(c); why != "" && f.AWS == nil {
		return nil, f.HandOff(why)
	}
	if why := needsNet(c, f.PostsDecisions); why != "" && f.Net == nil {
		return nil, f.HandOff(why)
	}
	return c, nil
}

// Registry loads the operation registry (in the service: the one it
// loaded last).
func (f *Env) Registry(c *config.Config) (*operations.Registry, error) {
	if f.Call != nil {
		return f.Call.State.Current().Registry, nil
	}
	reg, err := runner.LoadRegistry(c)
	if err == nil {
		// Files that look meant as operations but are not read
		// (k8s.TOML, k8s.toml.bak): named, never silently ignored.
		for _, w := range reg.Warnings {
			f.Warn("%s", w)
		}
	}
	return reg, err
}

// Policy loads the trust policy (in the service: the one it loaded last).
func (f *Env) Policy(c *config.Config) (*approval.Policy, error) {
	if f.Call != nil {
		return f.Call.State.Current().Policy, nil
	}
	return approval.LoadPolicy(c.Trust)
}

// Store opens the configured store backend.
func (f *Env) Store(c *config.Config) (store.Store, error) {
	switch c.Store.Backend {
	case "embedded":
		return store.OpenDir(c.StoreDir())
	case "dynamodb":
		if f.AWS != nil {
			return f.AWS.OpenStore(c)
		}
	}
	return nil, &config.Error{Path: c.Path, Msg: fmt.Sprintf("store backend %q is not available in this build", c.Store.Backend)}
}

// KeyFile returns the acting principal's key path, or "".
func (f *Env) KeyFile() string {
	if f.KeyPath != "" {
		return f.KeyPath
	}
	v, _ := f.LookupEnv("PROD_WRITE_KEY")
	return v
}

// PassEnv reads the caller's value of a variable an operation passes by
// value (env.pass): in the service, the client is asked for that one name.
// It is the only part of a caller's environment the service ever sees, and
// it is bound into the fingerprint by value.
func (f *Env) PassEnv(name string) (string, bool) {
	if f.Call != nil {
		if f.Call.Socket == nil {
			return "", false // MCP over HTTP: no caller environment at all
		}
		v, ok, err := f.Call.Socket.Env(name)
		return v, ok && err == nil
	}
	return f.LookupEnv(name)
}

// HasKey reports whether the caller named (or, to the service, handed
// over) a key.
func (f *Env) HasKey() bool {
	if f.Call != nil {
		return f.Call.Key != nil
	}
	return f.KeyFile() != ""
}

// LoadKey reads the caller's key, returning it and how to name it in
// messages. In the service it is the descriptor the client opened: the
// service never opens a key path a caller names, so it cannot be made to
// read the runner's.
func (f *Env) LoadKey() (*keys.Private, string, error) {
	if f.Call != nil {
		if f.Call.Key == nil {
			return nil, "", &UsageError{Msg: "this command needs the acting principal's key: pass --key FILE or set PROD_WRITE_KEY"}
		}
		k, err := keys.LoadFile(f.Call.Key, "the key handed over")
		return k, "the key handed over", err
	}
	path := f.KeyFile()
	if path == "" {
		return nil, "", &UsageError{Msg: "this command needs the acting principal's key: pass --key FILE or set PROD_WRITE_KEY"}
	}
	k, err := keys.Load(path)
	return k, path, err
}

// Actor loads the acting key and finds its principal, refusing an unknown
// key or one without role.
func (f *Env) Actor(p *approval.Policy, role string) (*keys.Private, *approval.Principal, error) {
	k, name, err := f.LoadKey()
	if err != nil {
		return nil, nil, err
	}
	pr, ok := p.ByKey(k.Public().ID())
	if !ok {
		return nil, nil, refusal.New(refusal.PrincipalUnknown, "%s belongs to no principal of the trust policy", keyName(name)).Needs("a principal with this key in trust.toml")
	}
	if role != "" && !pr.Has(role) {
		return nil, nil, refusal.New(refusal.RoleMissing, "%s does not hold the %s role", pr.ID, role).Needs("role " + role)
	}
	return k, pr, nil
}

func keyName(name string) string {
	if strings.HasPrefix(name, "the ") {
		return name
	}
	return "the key in " + name
}

// ResolveDir resolves the working directory a plan is bound to. In the
// service, the caller's is the directory it handed over (the kernel's name
// for it, symlinks resolved); any other is an operation's declared cwd,
// which comes from the registry.
func (f *Env) ResolveDir(dir string) (string, error) {
	if f.Call != nil {
		if dir == "" && f.Call.Hosted {
			return "", refusal.New(refusal.ParamInvalid, "the operation declares no cwd, and MCP over HTTP has no working directory of its own: nothing was planned").Needs("a cwd in the operation, or [service] mcp_cwd in the service's configuration")
		}
		if dir == "" {
			return "", &UsageError{Msg: "the client handed over no working directory"}
		}
		if dir == f.Call.CwdPath {
			return dir, nil
		}
	}
	return operations.ResolveDir(dir)
}
