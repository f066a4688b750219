// Package cli wires prod-write's commands (SPEC §8). Each command has one
// constructor, NewCmdX(f, runF), whose RunE only copies flags into an
// options struct; the work is in a run function that tests can call with
// fakes. Errors are printed once, by [Main], and mapped to exit codes by
// [ExitCode].
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/boundary"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
)

// Version is set at build time with -ldflags "-X ...cli.Version=…".
var Version = "dev"

// IOStreams are a command's standard streams.
type IOStreams struct {
	In       io.Reader
	Out, Err io.Writer
	// ErrTTY reports whether Err is a terminal: progress is shown only then.
	ErrTTY bool
}

// System returns the process's own streams.
func System() *IOStreams {
	return &IOStreams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, ErrTTY: term.IsTerminal(int(os.Stderr.Fd()))}
}

// Factory holds what commands depend on; tests swap each field.
type Factory struct {
	IO        *IOStreams
	Now       func() time.Time
	LookupEnv func(string) (string, bool)
	Getwd     func() (string, error)

	// AWS holds the distributed backends and Net the bridges and the MCP
	// server; both are nil in prod-write, which hands the commands that
	// need them to prod-write-net (handoff.go).
	AWS AWS
	Net Net
	// postsDecisions is set by the commands that post to the bridges
	// (file, withdraw): Config hands them over when bridges are on.
	postsDecisions bool
	// Args are the command line's arguments, for that hand-over.
	Args []string
	// Executable and Exec find and start prod-write-net; nil means
	// os.Executable and execve(2).
	Executable func() (string, error)
	Exec       func(path string, argv, env []string) error

	// Global flags.
	ConfigPath string
	KeyPath    string
	JSON       bool
}

// NewFactory returns a factory for the real process.
func NewFactory() *Factory {
	return &Factory{IO: System(), Now: time.Now, LookupEnv: os.LookupEnv, Getwd: os.Getwd}
}

// Config loads prod-write.toml as the global flags and environment say.
func (f *Factory) Config() (*config.Config, error) {
	cwd, err := f.Getwd()
	if err != nil {
		return nil, err
	}
	env, _ := f.LookupEnv("PROD_WRITE_CONFIG")
	path, err := config.Find(f.ConfigPath, env, cwd)
	if err != nil {
		return nil, err
	}
	c, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if boundary.Privileged() {
		// Running with privilege the caller lacks: the policy must come
		// from files the caller cannot change (SPEC §13).
		files, _ := filepath.Glob(filepath.Join(c.Registry, "*.toml"))
		for _, p := range append([]string{c.Path, c.Trust, c.Registry}, files...) {
			if err := boundary.CheckTrusted(p); err != nil {
				return nil, err
			}
		}
	}
	if why := needsAWS(c); why != "" && f.AWS == nil {
		return nil, f.handOff(why)
	}
	if why := needsNet(c, f.postsDecisions); why != "" && f.Net == nil {
		return nil, f.handOff(why)
	}
	return c, nil
}

// Registry loads the operation registry.
func (f *Factory) Registry(c *config.Config) (*operations.Registry, error) {
	return operations.Load(c.Registry, c.SecurePath)
}

// Policy loads the trust policy.
func (f *Factory) Policy(c *config.Config) (*approval.Policy, error) {
	return approval.LoadPolicy(c.Trust)
}

// Store opens the configured store backend.
func (f *Factory) Store(c *config.Config) (store.Store, error) {
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
func (f *Factory) KeyFile() string {
	if f.KeyPath != "" {
		return f.KeyPath
	}
	v, _ := f.LookupEnv("PROD_WRITE_KEY")
	return v
}

// Actor loads the acting key and finds its principal, refusing an unknown
// key or one without role.
func (f *Factory) Actor(p *approval.Policy, role string) (*keys.Private, *approval.Principal, error) {
	path := f.KeyFile()
	if path == "" {
		return nil, nil, &usageError{msg: "this command needs the acting principal's key: pass --key FILE or set PROD_WRITE_KEY"}
	}
	k, err := loadCallerKey(path)
	if err != nil {
		return nil, nil, err
	}
	pr, ok := p.ByKey(k.Public().ID())
	if !ok {
		return nil, nil, refusal.New(refusal.PrincipalUnknown, "the key in %s belongs to no principal of the trust policy", path).Needs("a principal with this key in trust.toml")
	}
	if role != "" && !pr.Has(role) {
		return nil, nil, refusal.New(refusal.RoleMissing, "%s does not hold the %s role", pr.ID, role).Needs("role " + role)
	}
	return k, pr, nil
}

// loadCallerKey reads a key the caller named with the caller's own
// credentials, so a privileged prod-write cannot be made to read the runner
// key on the caller's behalf.
func loadCallerKey(path string) (*keys.Private, error) {
	var k *keys.Private
	err := boundary.AsCaller(func() (err error) {
		k, err = keys.Load(path)
		return err
	})
	return k, err
}

// callerFiles reads file parameters with the caller's own credentials
// (the program, on the secure path, is read as prod-write).
type callerFiles struct{ operations.Digester }

func (c callerFiles) Digest(kind, name, path string, max int64) (size int64, sum string, err error) {
	if kind != "file" {
		return c.Digester.Digest(kind, name, path, max)
	}
	err = boundary.AsCaller(func() (err error) {
		size, sum, err = c.Digester.Digest(kind, name, path, max)
		return err
	})
	return size, sum, err
}

// resolveDirAsCaller resolves a working directory with the caller's own
// credentials: it is the caller's directory, which prod-write's user may not
// be able to search.
func resolveDirAsCaller(dir string) (string, error) {
	var out string
	err := boundary.AsCaller(func() (err error) {
		out, err = operations.ResolveDir(dir)
		return err
	})
	return out, err
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Main runs prod-write with os.Args and returns the exit status. aws and
// net, when not nil, link the distributed backends, the bridges and the
// MCP server in (prod-write-net).
func Main(aws AWS, net Net) int {
	f := NewFactory()
	f.AWS, f.Net = aws, net
	return Run(os.Args[1:], f)
}

// Run runs prod-write with args and returns the exit status.
func Run(args []string, f *Factory) int {
	f.Args = args
	root := NewCmdRoot(f)
	root.SetArgs(args)
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.Err)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	printError(f, err)
	return ExitCode(err)
}

func printError(f *Factory, err error) {
	w := f.IO.Err
	var exitErr *ExitError
	if errors.As(err, &exitErr) && exitErr.Msg == "" {
		return
	}
	if r, ok := refusal.As(err); ok {
		if f.JSON {
			out := struct {
				Outcome string `json:"outcome"`
				*refusal.Error
			}{"refused", r}
			b, _ := json.Marshal(out)
			fmt.Fprintf(w, "%s\n", b)
			return
		}
		fmt.Fprintf(w, "prod-write: refused (%s): %s\n", r.Code, r.Reason)
		if len(r.Missing) > 0 {
			fmt.Fprintf(w, "prod-write: hint: missing: %s\n", strings.Join(r.Missing, "; "))
		}
		return
	}
	msg := err.Error()
	if f.JSON {
		b, _ := json.Marshal(map[string]string{"outcome": "error", "code": errorCode(err), "error": msg})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, "prod-write: error: %s\n", msg)
	var usage *usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(w, "prod-write: hint: see 'prod-write --help'\n")
	}
}

// NewCmdRoot builds the command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "prod-write",
		Short: "Approval-gated production writes",
		Long: `prod-write runs a named production write only when that exact invocation was
approved: by a standing Gera decision, or by an operator's certainty record
plus a human's approval. Every run leaves a signed, fsynced receipt that CI
replays.`,
		Example: `  prod-write init --demo ./pw && cd ./pw
  prod-write plan config-push --target staging --param service=api --file config=app.toml --key keys/agent.key`,
		Version:       Version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.PersistentFlags().StringVar(&f.ConfigPath, "config", "", "configuration `FILE` (default: prod-write.toml here or in a parent, or $PROD_WRITE_CONFIG)")
	root.PersistentFlags().StringVar(&f.KeyPath, "key", "", "the acting principal's private key `FILE` (default $PROD_WRITE_KEY)")
	root.PersistentFlags().BoolVar(&f.JSON, "json", false, "machine-readable output")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })

	root.AddCommand(
		NewCmdInit(f, nil),
		NewCmdKeygen(f, nil),
		NewCmdOps(f),
		NewCmdPlan(f, nil),
		NewCmdStatus(f, nil),
		NewCmdFile(f, nil),
		NewCmdDecide(f, nil),
		NewCmdGera(f, nil),
		NewCmdWithdraw(f, nil),
		NewCmdRun(f, nil),
		NewCmdReceipts(f),
		NewCmdStore(f, nil),
		NewCmdReplay(f, nil),
		NewCmdBridge(f, nil),
		NewCmdDoctor(f, nil),
		NewCmdMCP(f, nil),
	)
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Example = "  source <(prod-write completion bash)\n  prod-write completion zsh > \"${fpath[1]}/_prod-write\""
			for _, sh := range c.Commands() {
				sh.Example = fmt.Sprintf("  prod-write completion %s > prod-write.%s", sh.Name(), sh.Name())
			}
		}
	}
	for _, c := range root.Commands() {
		if c.Args == nil {
			c.Args = cobra.NoArgs
		}
		wrapArgs(c)
	}
	return root
}

// wrapArgs makes argument-count errors usage errors (exit 64).
func wrapArgs(c *cobra.Command) {
	if c.Args != nil {
		check := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return &usageError{msg: fmt.Sprintf("%s: %v", cmd.CommandPath(), err)}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}
