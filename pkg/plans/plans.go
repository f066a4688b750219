// Package plans holds what the application API (pkg/api) does with a
// plan before it runs: plan it (resolve, sign, store, bind its
// precondition, derive its decision request), judge its status as run
// would now, with its decision request, and wait for that decision.
//
// It knows no command line, no command factory and no terminal (docs/DESIGN.md §14,
// docs/adr/0038-one-typed-api.md): the CLI in local mode and the runner
// service each hand in the [Deps] they have, and render the result on
// their side.
package plans

import (
	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/runner"
)

// Deps is what the calls on plans depend on.
type Deps struct {
	// Runner loads and judges the plan: its clock, the configuration,
	// policy, store and registry, and the caller's files, environment and
	// working directory (pkg/runner).
	Runner *runner.Runner
	// Reloaded, when set, returns a channel closed once the policy and
	// registry the call judges by are replaced (the runner service's
	// reload); nil outside the service.
	Reloaded func() <-chan struct{}

	// Getwd is the caller's working directory, asked for only when a plan
	// binds it.
	Getwd func() (string, error)
	// Actor loads the caller's key and finds its principal, refusing one
	// without role; nil when the caller gave (or handed over) no key.
	Actor func(p *approval.Policy, role string) (*keys.Private, *approval.Principal, error)
	// Hosted is a call of MCP over HTTP: every file is supplied inline,
	// none is a path (docs/adr/0039-inline-files-over-mcp-http.md).
	Hosted bool
}

// nonNil returns s, or an empty slice for nil, so that a list prints as []
// and never as null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
