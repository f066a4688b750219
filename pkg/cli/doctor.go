package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/admin"
)

// DoctorOptions are doctor's inputs.
type DoctorOptions struct {
	F  *Factory `json:"-"`
	As string
}

// NewCmdDoctor builds `doctor`.
func NewCmdDoctor(f *Factory, runF func(*DoctorOptions) error) *cobra.Command {
	opts := &DoctorOptions{F: f}
	cmd := &cobra.Command{
		Use:   "doctor [--as USER]",
		Short: "Check a deployment against the trust boundary and name each weakness",
		Long: `doctor checks the deployment it runs in against the trust boundary of
docs/DESIGN.md §13 and names each weakness with its fix. Run it on the service host with
the service's configuration, as root, with --as naming the agent's account:
it then reports what that account can reach.

With [service] socket configured (the runner service, docs/DEPLOYMENT.md),
it reports as critical what the account can read (the runner and bridge
keys, the bridge secret files, the files of the credentials directory, the
store and journal, and any *.key under the configuration's directory whose
principal holds a role other than agent), what it can change (the
configuration, trust policy, registry, MCP token file, prod-write's
binaries and systemd units, the programs the operations run, the state and
journal, the credentials directory, the socket's directory, a run_as
account's home), and whether it can become a run_as account (root, or the
same uid). It asks the service, as any caller does (the API's ops list,
with no key handed over): one that does not answer is a note, one that
serves operations other than the registry on disk holds (not reloaded
since it changed) a warning. It also checks the registry: each mutating operation names a
run_as account that is neither the service's own (the owner of the state
directory) nor root without [service] allow_root.

Without [service] socket, prod-write runs in-process as whoever invokes it
(local mode: a laptop, CI, a demo): there is no boundary, and doctor says so
in one warning.

In both modes: a setuid or setgid prod-write binary (there is no setuid
mode), a missing runner key, a key or secret file others can read, state
on a filesystem where fsync is not durable (tmpfs), a trust policy that
does not load or a principal without a key. Reach is judged by file modes
and owners; ACLs, capabilities and sudo rules are not read.

One line per finding, with its severity and fix; --json for machines.
Exit 0 when clean (notes only), 1 with any warning or critical finding.`,
		Example: `  sudo prod-write doctor --config /etc/prod-write/prod-write.toml --as agent
  sudo prod-write doctor --as agent --json
  prod-write doctor`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return doctorRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.As, "as", "", "check what this account (the agent's) can reach instead of the invoking one")
	return cmd
}

func doctorRun(o *DoctorOptions) error {
	r, err := admin.Doctor(context.Background(), &o.F.Env, o.As)
	if err != nil {
		return err
	}
	if o.F.JSON {
		if err := printJSON(o.F.IO.Out, r); err != nil {
			return err
		}
	} else {
		for _, fd := range r.Findings {
			line := fmt.Sprintf("%-8s %s: %s", fd.Severity, fd.Check, fd.Message)
			if fd.Fix != "" {
				line += "\n         fix: " + fd.Fix
			}
			fmt.Fprintln(o.F.IO.Out, line)
		}
		if r.OK {
			fmt.Fprintf(o.F.IO.Out, "ok: no weakness found (checked as %s)\n", r.Account)
		}
	}
	if !r.OK {
		noun := "weaknesses"
		if r.Weak == 1 {
			noun = "weakness"
		}
		return &ExitError{Code: ExitInvalid, Msg: fmt.Sprintf("doctor: %d %s found (checked as %s)", r.Weak, noun, r.Account)}
	}
	return nil
}
