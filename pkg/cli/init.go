package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/admin"
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

func initRun(o *InitOptions) error {
	r, err := admin.Init(admin.InitRequest{Dir: o.Dir, Demo: o.Demo, State: o.State, Srv: o.Srv})
	if err != nil {
		return err
	}
	w := o.F.IO.Out
	if o.F.JSON {
		return printJSON(w, r)
	}
	fmt.Fprintf(w, "wrote %s\n", r.Dir)
	for _, fl := range r.Files {
		fmt.Fprintf(w, "  %s\n", fl)
	}
	for _, k := range r.Keys {
		fmt.Fprintf(w, "  %s (0600)\n", k.Path)
	}
	if r.State != "state" {
		fmt.Fprintf(w, "  %s/ (0700)\n", r.State)
	} else {
		fmt.Fprintf(w, "  state/ (0700)\n")
	}
	return nil
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
	r, err := admin.Keygen(o.Out)
	if err != nil {
		return err
	}
	if o.F.JSON {
		return printJSON(o.F.IO.Out, r)
	}
	fmt.Fprintln(o.F.IO.Out, r.PublicKey)
	return nil
}
