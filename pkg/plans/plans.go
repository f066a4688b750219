// Package plans holds what the application API (pkg/api) does with a
// stored plan before it runs: judge its status as run would now, with its
// decision request, and wait for that decision.
//
// It knows no command line, no command factory and no terminal (SPEC §14,
// docs/adr/0038-one-typed-api.md): the CLI in local mode and the runner
// service each hand in the [Deps] they have, and render the result on
// their side.
package plans

import (
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
}

// nonNil returns s, or an empty slice for nil, so that a list prints as []
// and never as null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
