// Package version says which build of prod-write this is: what every
// binary's `--version`, the man pages and MCP's serverInfo report. It
// imports nothing of prod-write, so that any package may say it.
package version

import (
	"runtime/debug"
	"strings"
	"time"
)

// Version is what `--version`, the man pages and MCP's serverInfo report,
// read from the build info: the module version for `go install …@vX`, and
// the VCS revision the binary was built from, never just "dev". (Its
// initializer is a call, so -ldflags -X cannot set it.)
var Version = buildVersion()

// buildVersion describes the build from its embedded build info.
func buildVersion() string { return versionOf(debug.ReadBuildInfo()) }

// versionOf describes a build from its build info: the module version,
// and the VCS revision when the version does not name it. A build from a
// clone without a tag, which an older go (or one not told the version)
// calls "(devel)", gets the pseudo-version go 1.24 and later stamps itself,
// v0.0.0-YYYYMMDDhhmmss-REVISION, +dirty when the tree was modified; or
// v0.0.0-devel-REVISION without the commit's time. "(devel)" is left only
// to a build with no VCS information at all (go test, -buildvcs=false, a
// git worktree).
func versionOf(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "unknown (no build info)"
	}
	var rev, modified, when string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		case "vcs.time":
			when = s.Value
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		if rev == "" {
			return "(devel)"
		}
		stamp := "devel"
		if t, err := time.Parse(time.RFC3339, when); err == nil {
			stamp = t.UTC().Format("20060102150405")
		}
		v = "v0.0.0-" + stamp + "-" + rev
		if modified == "true" {
			v += "+dirty"
		}
		return v
	}
	if rev != "" && !strings.Contains(v, rev) {
		v += " rev " + rev
		if modified == "true" {
			v += "+modified"
		}
		if when != "" {
			v += " (" + when + ")"
		}
	}
	return v
}
