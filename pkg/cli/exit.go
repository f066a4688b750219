package cli

import (
	"github.com/prod-write/prod-write/pkg/localapi"
)

// Exit codes (docs/DESIGN.md §8, sysexits.h), listed in README.md: pkg/localapi's,
// which the in-process API decides by.
const (
	ExitOK        = localapi.ExitOK
	ExitInvalid   = localapi.ExitInvalid
	ExitUsage     = localapi.ExitUsage
	ExitDataErr   = localapi.ExitDataErr
	ExitSoftware  = localapi.ExitSoftware
	ExitIOErr     = localapi.ExitIOErr
	ExitTempFail  = localapi.ExitTempFail
	ExitRefused   = localapi.ExitRefused
	ExitConfig    = localapi.ExitConfig
	ExitTimeout   = localapi.ExitTimeout
	ExitSignalled = localapi.ExitSignalled
)

// ExitError carries an exit status decided by the command itself
// (localapi.ExitError).
type ExitError = localapi.ExitError

// ExitStatus is one row of ExitStatuses.
type ExitStatus struct {
	Code    int
	Plus    string // "N": the status is Code+N (a signal's number)
	Meaning string
}

// ExitStatuses documents every exit code above, in order: the man page's
// EXIT STATUS is generated from it (cmd/prod-write-docs), and a test
// (exit_doc_test.go) holds it to the constants pkg/localapi defines, so
// the two cannot drift.
var ExitStatuses = []ExitStatus{
	{Code: ExitOK, Meaning: "Success; for run, the program ran and exited 0."},
	{Code: ExitInvalid, Meaning: "replay found a receipt that does not verify."},
	{Code: ExitUsage, Meaning: "The command line is wrong."},
	{Code: ExitDataErr, Meaning: "Bad input data: a plan whose params or files break their declared rules (the refusal param_invalid), a fingerprint or receipt not found."},
	{Code: ExitSoftware, Meaning: "Internal error, or the program could not be started."},
	{Code: ExitIOErr, Meaning: "I/O error."},
	{Code: ExitTempFail, Meaning: "The runner service is busy: nothing was done; try again."},
	{Code: ExitRefused, Meaning: "Refused: the gate said no (also store_unavailable, operation_unavailable); nothing ran."},
	{Code: ExitConfig, Meaning: "Configuration error: prod-write.toml, an operation's definition, the trust policy, or a key file."},
	{Code: ExitTimeout, Meaning: "run: the operation's timeout ended the program."},
	{Code: ExitSignalled, Plus: "N", Meaning: "run: the program was killed by signal N."},
}

// ExitCode maps an error to the process exit status (localapi.ExitCode,
// the one place that does).
func ExitCode(err error) int { return localapi.ExitCode(err) }
