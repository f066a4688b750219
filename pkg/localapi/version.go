package localapi

// FormatVersion is the format_version of every JSON document a command
// prints with --json (docs/JSON.md): additive changes keep it, a rename, a
// removal or a change of meaning bumps it.
const FormatVersion = 1

// NonNil returns s, or an empty slice for nil, so that a list prints as []
// and never as null.
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
