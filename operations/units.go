package operations

import "github.com/prod-write/prod-write/pkg/units"

// Duration and Size are the registry's value types written as text
// (pkg/units).
type (
	Duration = units.Duration
	Size     = units.Size
)
