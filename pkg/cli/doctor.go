package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/doctor"
)

// DoctorOptions are doctor's inputs.
type DoctorOptions struct {
	F  *Factory
	As string
}

// NewCmdDoctor builds `doctor`.
func NewCmdDoctor(f *Factory, runF func(*DoctorOptions) error) *cobra.Command {
	opts := &DoctorOptions{F: f}
	cmd := &cobra.Command{
		Use:   "doctor [--as USER]",
		Short: "Check a deployment against the trust boundary and name each weakness",
		Long: `doctor checks the deployment it runs in (SPEC §13): whether the invoking user
(or --as USER) can change the configuration, trust policy, registry, state or
journal, or a program an operation runs; whether keys are readable by others;
whether the runner key is missing; whether the state is on a filesystem where
fsync is not durable; whether principals lack keys. One line per finding,
with its severity and fix. Exit 0 when clean, 1 with findings.`,
		Example: `  prod-write doctor
  sudo prod-write doctor --as agent --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return doctorRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.As, "as", "", "check what this user account can reach instead of the invoking one")
	return cmd
}

func doctorRun(o *DoctorOptions) error {
	c, err := o.F.Config()
	if err != nil {
		return err
	}
	who := doctor.Current()
	if o.As != "" {
		if who, err = doctor.Lookup(o.As); err != nil {
			return &usageError{msg: fmt.Sprintf("--as %s: %v", o.As, err)}
		}
	}
	findings := doctor.Check(c, who)
	weak := 0
	for _, fd := range findings {
		if fd.Severity != doctor.Info {
			weak++
		}
	}
	if o.F.JSON {
		if err := printJSON(o.F.IO.Out, map[string]any{"account": who.Name, "ok": weak == 0, "findings": findings}); err != nil {
			return err
		}
	} else {
		for _, fd := range findings {
			line := fmt.Sprintf("%-8s %s: %s", fd.Severity, fd.Check, fd.Message)
			if fd.Fix != "" {
				line += "\n         fix: " + fd.Fix
			}
			fmt.Fprintln(o.F.IO.Out, line)
		}
		if weak == 0 {
			fmt.Fprintf(o.F.IO.Out, "ok: no weakness found (checked as %s)\n", who.Name)
		}
	}
	if weak > 0 {
		return &ExitError{Code: ExitInvalid, Msg: fmt.Sprintf("doctor: %d weaknesses found (checked as %s)", weak, who.Name)}
	}
	return nil
}
