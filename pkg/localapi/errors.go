package localapi

import (
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
)

// Exit codes (docs/DESIGN.md §8, sysexits.h), listed in README.md.
const (
	ExitOK        = 0
	ExitInvalid   = 1                   // replay found a receipt that does not verify
	ExitUsage     = 64                  // the command line is wrong
	ExitDataErr   = 65                  // bad input data
	ExitSoftware  = runner.ExitSoftware // internal error (70)
	ExitIOErr     = 74                  // I/O error
	ExitTempFail  = 75                  // the runner service is busy: try again; nothing was done
	ExitRefused   = 77                  // the gate said no; nothing ran
	ExitConfig    = 78                  // configuration error
	ExitTimeout   = 124
	ExitSignalled = 128
)

// UsageError is a wrong command line.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// ExitError carries an exit status decided by the command itself: the
// program's own status for run, 1 for a failed replay.
type ExitError struct {
	Code int
	Msg  string // empty: nothing more to print
}

func (e *ExitError) Error() string { return e.Msg }

// DataError is input the command cannot use (exit 65).
type DataError struct{ Err error }

func (e *DataError) Error() string { return e.Err.Error() }

func (e *DataError) Unwrap() error { return e.Err }

// BadInputRefusal is a refusal of a plan's own params or files by their
// declared rules (param_invalid at plan time): bad input data (exit 65,
// README), since no gate said no and no approval would change it. It is
// still the typed refusal, which it unwraps to: --json prints the refusal
// line (with exit_code 65), and MCP, local or through the service, answers
// with the refusal as before. The same code at run time (a secret not set,
// a definition that changed since the plan) is the gate's, exit 77.
type BadInputRefusal struct{ R *refusal.Error }

func (e *BadInputRefusal) Error() string { return e.R.Error() }

func (e *BadInputRefusal) Unwrap() error { return e.R }

// PlanInput marks err as bad input when it is a param_invalid refusal.
func PlanInput(err error) error {
	if r, ok := refusal.As(err); ok && r.Code == refusal.ParamInvalid {
		return &BadInputRefusal{r}
	}
	return err
}
