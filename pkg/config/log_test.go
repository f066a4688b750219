package config_test

import (
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/config"
)

// TestLogSection: [log] defaults, bounds and paths.
func TestLogSection(t *testing.T) {
	for _, tc := range []struct {
		toml     string
		path     string
		maxSize  int64
		keep     int
		errMatch string
	}{
		{"", "", config.DefaultDecisionsMaxSize, config.DefaultDecisionsKeep, ""},
		{"[log]\ndecisions = \"state/d.jsonl\"", "/etc/pw/state/d.jsonl", config.DefaultDecisionsMaxSize, config.DefaultDecisionsKeep, ""},
		{"[log]\ndecisions = \"/var/log/d.jsonl\"\ndecisions_max_size = \"64KiB\"\ndecisions_keep = 0", "/var/log/d.jsonl", 64 << 10, 0, ""},
		{"[log]\ndecisions = \"-\"", "-", config.DefaultDecisionsMaxSize, config.DefaultDecisionsKeep, ""},
		{"[log]\ndecisions_max_size = 100", "", 0, 0, "decisions_max_size 100: want at least"},
		{"[log]\ndecisions_keep = -1", "", 0, 0, "decisions_keep -1"},
		{"[log]\ndecisions_keep = 101", "", 0, 0, "decisions_keep 101"},
		{"[log]\ndecisions_max_size = \"lots\"", "", 0, 0, "size"},
		{"[log]\ndecision = \"x\"", "", 0, 0, "decision"},
	} {
		c, err := config.Parse("/etc/pw/prod-write.toml", []byte(tc.toml))
		if tc.errMatch != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errMatch) {
				t.Errorf("%q: error %v, want one containing %q", tc.toml, err, tc.errMatch)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.toml, err)
			continue
		}
		if c.DecisionsPath() != tc.path || int64(c.Log.DecisionsMaxSize) != tc.maxSize || *c.Log.DecisionsKeep != tc.keep {
			t.Errorf("%q: path %q size %d keep %d, want %q %d %d", tc.toml, c.DecisionsPath(), c.Log.DecisionsMaxSize, *c.Log.DecisionsKeep, tc.path, tc.maxSize, tc.keep)
		}
	}
}
