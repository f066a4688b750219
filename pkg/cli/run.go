package cli

import (
	"context"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/fastrun"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// RunOptions are run's inputs.
type RunOptions struct {
	F           *Factory `json:"-"`
	Fingerprint string
}

// NewCmdRun builds `run`.
func NewCmdRun(f *Factory, runF func(*RunOptions) error) *cobra.Command {
	opts := &RunOptions{F: f}
	return &cobra.Command{
		Use:   "run FP",
		Short: "Run an approved plan: gate, consume, fsynced intent, exec, outcome",
		Long: `run loads the plan, recomputes its fingerprint from reality (the program and
files are snapshotted and hashed, and those snapshots are what runs), asks
the gate, consumes the approval atomically, writes and fsyncs the intent
receipt, executes the program with no shell and a scratch environment,
writes the outcome receipt, and exits with the program's status (128+N for
signal N, 124 on the operation's timeout; 77 if refused, and then nothing
ran).`,
		Example: "  prod-write run sha256:9f…",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fingerprint = args[0]
			if runF != nil {
				return runF(opts)
			}
			return runRun(opts)
		},
	}
}

// runRun runs the plan through the API (in-process, or the runner
// service's) and says what ran, on the caller's side: the exit status is
// the program's.
func runRun(o *RunOptions) error {
	f := o.F
	a, err := f.api()
	if err != nil {
		return err
	}
	if la, ok := a.(localapi.API); ok && f.Call == nil {
		go keys.Warm()
		// run is short and allocates little: collecting garbage would only
		// add latency in front of the program (docs/PERFORMANCE.md). A
		// memory limit still bounds it. (Not in the service, which lives
		// long and runs many calls at once.)
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(256 << 20))
		if f.IO.ErrTTY && !f.JSON {
			la.Progress = localapi.ProgressPrinter(f.IO.Err)
			a = la
		}
	}
	r, err := a.Run(context.Background(), api.RunRequest{Fingerprint: o.Fingerprint, Stdin: f.IO.In, Stdout: f.IO.Out, Stderr: f.IO.Err})
	if err != nil {
		return err
	}
	return printRun(f, r)
}

// printRun says what ran, after the program's own output, as the small
// client does through the service (fastrun.PrintRun); its error is the
// program's exit status.
func printRun(f *Factory, r *api.RunResult) error {
	if code := fastrun.PrintRun(f.IO.Err, f.JSON, f.IO.ErrTTY, r); code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}
