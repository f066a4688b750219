package cli

import (
	"errors"
	"io/fs"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/service"
	"github.com/prod-write/prod-write/pkg/servicecall"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// Exit codes (SPEC §8, sysexits.h), listed in README.md: pkg/localapi's,
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
// EXIT STATUS is generated from it (cmd/prod-write-docs), and a test holds
// it to the constants, so the two cannot drift.
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

// ExitCode maps an error to the process exit status. It is the one place
// that does.
func ExitCode(err error) int {
	var (
		exitErr   *ExitError
		usage     *localapi.UsageError
		badCwd    *servicecall.CwdError
		refused   *refusal.Error
		cfgErr    *config.Error
		defErr    *operations.DefinitionError
		policyErr *approval.ConfigError
		insecure  *keys.InsecureError
		input     *operations.InputError
		badFP     *store.BadFingerprintError
		dataErr   *localapi.DataError
		pathErr   *fs.PathError
		svcErr    *service.Error
		apiErr    *api.Error
		badIn     *localapi.BadInputRefusal
		vsaRef    *receipts.VSARefusedError
		vsaBad    *receipts.MalformedVSAError
		incons    *receipts.ConsistencyRefusedError
		expRef    *receipts.ExportRefusedError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &exitErr):
		return exitErr.Code
	case errors.As(err, &svcErr) && svcErr.Code == service.CodeBusy:
		return ExitTempFail
	case errors.As(err, &apiErr):
		// As the service judged it.
		return apiErr.Exit
	case errors.As(err, &usage), errors.As(err, &badCwd):
		return ExitUsage
	case errors.As(err, &badIn):
		return ExitDataErr
	case errors.As(err, &refused), errors.As(err, &vsaRef), errors.As(err, &incons), errors.As(err, &expRef):
		return ExitRefused
	case errors.As(err, &vsaBad):
		return ExitDataErr
	case errors.As(err, &insecure), errors.As(err, &cfgErr), errors.As(err, &defErr),
		errors.As(err, &policyErr), errors.Is(err, keys.ErrNotAKey):
		return ExitConfig
	case errors.As(err, &input), errors.As(err, &badFP), errors.As(err, &dataErr):
		return ExitDataErr
	case errors.Is(err, store.ErrNotFound):
		return ExitDataErr
	case errors.As(err, &pathErr):
		return ExitIOErr
	}
	return ExitSoftware
}

// errorCode is the stable code of an error in --json output.
func errorCode(err error) string {
	var insecure *keys.InsecureError
	var vsaRef *receipts.VSARefusedError
	if errors.As(err, &vsaRef) {
		return "vsa_refused"
	}
	if incons := (*receipts.ConsistencyRefusedError)(nil); errors.As(err, &incons) {
		return "consistency_refused"
	}
	if expRef := (*receipts.ExportRefusedError)(nil); errors.As(err, &expRef) {
		return "export_refused"
	}
	if apiErr := (*api.Error)(nil); errors.As(err, &apiErr) {
		return apiErr.Code
	}
	switch ExitCode(err) {
	case ExitInvalid:
		return "invalid"
	case ExitUsage:
		return "usage"
	case ExitConfig:
		if errors.As(err, &insecure) {
			return string(refusal.InsecurePermissions)
		}
		return "config"
	case ExitDataErr:
		return "bad_input"
	case ExitIOErr:
		return "io"
	case ExitTempFail:
		return "busy"
	}
	return "internal"
}
