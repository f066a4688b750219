package localapi

import (
	"errors"
	"io/fs"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/service"
	"github.com/prod-write/prod-write/pkg/servicecall"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// ExitCode maps an error to the process exit status. It is the one place
// that does.
func ExitCode(err error) int {
	var (
		exitErr   *ExitError
		usage     *UsageError
		badCwd    *servicecall.CwdError
		refused   *refusal.Error
		cfgErr    *config.Error
		defErr    *operations.DefinitionError
		policyErr *approval.ConfigError
		insecure  *keys.InsecureError
		input     *operations.InputError
		badFP     *store.BadFingerprintError
		dataErr   *DataError
		pathErr   *fs.PathError
		svcErr    *service.Error
		apiErr    *api.Error
		badIn     *BadInputRefusal
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

// ErrorCode is the stable code of an error in --json output.
func ErrorCode(err error) string {
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
