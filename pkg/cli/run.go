package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
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

// printRun says what ran, after the program's own output; its error is
// the program's exit status.
func printRun(f *Factory, r *api.RunResult) error {
	switch {
	case f.JSON:
		printRan(f.IO.Err, r)
	case r.TimedOut:
		// Always said: the program's own output may end mid-line.
		fmt.Fprintf(f.IO.Err, "prod-write: %s timed out after %s and was killed (exit %d); receipts %d and %d\n",
			r.Operation, r.Timeout, r.ExitCode, r.Intent, r.Receipt)
	case f.IO.ErrTTY:
		// For a person at a terminal; scripts read the exit status.
		fmt.Fprintf(f.IO.Err, "prod-write: ran %s %.19s… (exit %d); receipts %d and %d\n",
			r.Operation, r.Fingerprint, r.ExitCode, r.Intent, r.Receipt)
	}
	if r.ExitCode != 0 {
		return &ExitError{Code: r.ExitCode}
	}
	return nil
}

// runAnswer renders the runner service's answer to a typed run on stderr,
// as `run` does through serviceAPI, and returns the exit status
// (pkg/fastrun's Env.Answer).
func runAnswer(body []byte, asJSON, errTTY bool, stderr io.Writer) int {
	f := &Factory{Env: localapi.Env{IO: &IOStreams{Out: io.Discard, Err: stderr, ErrTTY: errTTY}, JSON: asJSON}}
	var r api.RunResult
	notices, err := api.Decode(body, &r)
	for _, n := range notices {
		f.Notify(n)
	}
	if err == nil && r.Outcome != "ran" {
		err = errors.New("the runner service's run answered no outcome")
	}
	if err == nil {
		err = printRun(f, &r)
	}
	if err == nil {
		return ExitOK
	}
	printError(f, err)
	return ExitCode(err)
}
