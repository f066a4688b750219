//go:build !failpoints

// Package failpoint marks the places where a crash matters most (docs/DESIGN.md §6).
// In a build with the failpoints tag, [Hit] kills the process with SIGKILL
// when $PROD_WRITE_FAILPOINT names the point; in a release build it does
// nothing and compiles away.
package failpoint

// Enabled reports whether this build has failpoints.
const Enabled = false

// Hit is a failpoint. It does nothing in a release build.
func Hit(string) {}
