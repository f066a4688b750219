package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

// --version says which build this is, from the build info: never just
// "dev".
func TestVersionFromBuildInfo(t *testing.T) {
	v := buildVersion()
	if v == "" || v == "dev" || strings.HasPrefix(v, "unknown") {
		t.Fatalf("buildVersion() = %q, want the module version, a pseudo-version or (devel)", v)
	}
	if Version != v {
		t.Fatalf("Version = %q, want the build info's %q", Version, v)
	}
}

// A build from a clone with no tag never says "(devel)" when it has VCS
// information: it gets the pseudo-version go 1.24 and later would stamp, so
// the same commit has one version whatever built it.
func TestVersionOfBuildInfo(t *testing.T) {
	const (
		full = "3a82b24f89fc8abf06bb61f9b3625e5a15f16827"
		when = "2026-12-02T04:55:00Z"
	)
	vcs := func(kv ...string) []debug.BuildSetting {
		s := []debug.BuildSetting{{Key: "vcs", Value: "git"}}
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"devel, clean", "(devel)", vcs("vcs.revision", full, "vcs.time", when, "vcs.modified", "false"), "v0.0.0-20261202045500-3a82b24f89fc"},
		{"devel, dirty", "(devel)", vcs("vcs.revision", full, "vcs.time", when, "vcs.modified", "true"), "v0.0.0-20261202045500-3a82b24f89fc+dirty"},
		{"devel, no time", "(devel)", vcs("vcs.revision", full, "vcs.modified", "true"), "v0.0.0-devel-3a82b24f89fc+dirty"},
		{"devel, bad time", "(devel)", vcs("vcs.revision", full, "vcs.time", "yesterday"), "v0.0.0-devel-3a82b24f89fc"},
		{"devel, time in another zone", "(devel)", vcs("vcs.revision", full, "vcs.time", "2026-12-02T05:55:00+01:00"), "v0.0.0-20261202045500-3a82b24f89fc"},
		{"devel, short revision", "(devel)", vcs("vcs.revision", "3a82b24"), "v0.0.0-devel-3a82b24"},
		{"no version, revision", "", vcs("vcs.revision", full, "vcs.time", when), "v0.0.0-20261202045500-3a82b24f89fc"},
		{"devel, no VCS", "(devel)", nil, "(devel)"},
		{"no version, no VCS", "", nil, "(devel)"},
		// What go 1.26 stamps in a dirty clone, for the same commit: the
		// same string, left as it is.
		{"go's pseudo-version", "v0.0.0-20261202045500-3a82b24f89fc+dirty", vcs("vcs.revision", full, "vcs.time", when, "vcs.modified", "true"), "v0.0.0-20261202045500-3a82b24f89fc+dirty"},
		{"tag", "v1.2.3", nil, "v1.2.3"},
		{"tag, revision", "v1.2.3", vcs("vcs.revision", full, "vcs.time", when), "v1.2.3 rev 3a82b24f89fc (" + when + ")"},
		{"tag, modified", "v1.2.3+dirty", vcs("vcs.revision", full, "vcs.modified", "true"), "v1.2.3+dirty rev 3a82b24f89fc+modified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/prod-write/prod-write", Version: tc.version}, Settings: tc.settings}
			if got := versionOf(bi, true); got != tc.want {
				t.Errorf("versionOf(%q, %v) = %q, want %q", tc.version, tc.settings, got, tc.want)
			}
		})
	}
	if got := versionOf(nil, false); got != "unknown (no build info)" {
		t.Errorf("versionOf without build info = %q", got)
	}
}
