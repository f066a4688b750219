package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/plans"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/receipts"
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

// RunnerIdentity is this host's signing identity for receipts (in the
// service: the runner key it loaded).
func (f *Factory) RunnerIdentity(c *config.Config, p *approval.Policy) (*keys.Private, *approval.Principal, error) {
	if f.Call != nil {
		st := f.Call.State.Current()
		return st.RunnerKey, st.Runner, st.RunnerErr
	}
	return runner.LoadIdentity(c, p)
}

// Runner is the run order and plan context (pkg/Runner) as f's caller has
// them: in local mode this process's configuration, environment and
// stdio; in the service the call's descriptors and the service's own
// policy, credentials and run_as accounts.
func (f *Factory) Runner() *runner.Runner {
	r := &runner.Runner{
		Now:                f.Now,
		Config:             f.Config,
		Registry:           f.RegistryTo,
		Policy:             f.Policy,
		Store:              f.Store,
		ResolveFingerprint: f.ResolveFingerprint,
		Identity:           f.RunnerIdentity,
		PassEnv:            f.PassEnv,
		ResolveDir:         f.ResolveDir,
		LookupEnv:          f.LookupEnv,
		JournalSync:        f.JournalSync,
		Invoker:            func(p *approval.Policy) receipts.Invoker { return Invoker(f, p) },
		StartDecision: func(asked string, stderr io.Writer) (runner.DecisionLog, error) {
			d, err := f.StartDecision(asked, stderr)
			if err != nil {
				return nil, err
			}
			return d, nil
		},
		Ship: func(stderr io.Writer, c *config.Config, entries ...receipts.Appended) {
			shipReceipts(f.AWS, stderr, c, entries...)
		},
		WarnUnnotified: warnUnnotified,
	}
	if f.IO != nil {
		r.Stdin, r.Stdout, r.Stderr = f.IO.In, f.IO.Out, f.IO.Err
		if f.IO.ErrTTY && !f.JSON {
			r.Progress = ProgressPrinter(f.IO.Err)
		}
	}
	if sc := f.Call; sc != nil {
		r.PolicyShared = true
		r.CallerCwd = sc.Getwd
		r.OpenFile = sc.File
		r.Secret = sc.State.Secret
		r.Credential = sc.Credential
		r.Prepare = sc.Prepare
		r.Snapshots = &sc.State.Snapshots
		r.FinishOutput = sc.FinishOutput
		r.Signals = func() <-chan os.Signal {
			if sc.Socket != nil {
				return sc.Socket.Signals()
			}
			return nil // MCP over HTTP: no client to relay any
		}
	}
	return r
}

// Plans is what the calls on Plans (pkg/Plans) depend on, as f's
// caller has it; but for the key, which only planning asks for
// (localAPI.Plan).
func (f *Factory) Plans() *plans.Deps {
	return &plans.Deps{Runner: f.Runner(), Reloaded: f.PolicyReplaced, Getwd: f.Getwd, Hosted: f.Call != nil && f.Call.Hosted}
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
	if la, ok := a.(API); ok && f.Call == nil {
		go keys.Warm()
		// run is short and allocates little: collecting garbage would only
		// add latency in front of the program (docs/PERFORMANCE.md). A
		// memory limit still bounds it. (Not in the service, which lives
		// long and runs many calls at once.)
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(256 << 20))
		if f.IO.ErrTTY && !f.JSON {
			la.Progress = ProgressPrinter(f.IO.Err)
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
	err := api.Decode(body, &r)
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

// Invoker is who asked for the run: the account (in the service, the
// kernel's SO_PEERCRED, not anything the client says) and the principal of
// the key it presented, if any.
func Invoker(f *Factory, p *approval.Policy) receipts.Invoker {
	inv := receipts.Invoker{UID: os.Getuid()}
	if f.Call != nil {
		inv.UID = -1 // MCP over HTTP: a token, no account
		if f.Call.Socket != nil {
			inv.UID = int(f.Call.Socket.Peer.UID)
		}
	}
	if f.HasKey() {
		if k, _, err := f.LoadKey(); err == nil {
			if pr, ok := p.ByKey(k.Public().ID()); ok {
				inv.Principal = pr.ID
			}
		}
	}
	return inv
}
