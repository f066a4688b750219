package config_test

import (
	"errors"
	"testing"

	"github.com/prod-write/prod-write/pkg/config"
)

// TestParseTypeErrors: a value of the wrong type in prod-write.toml is
// named at its line, in words for people.
func TestParseTypeErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"registry = 1\n", "/etc/pw/prod-write.toml:1: registry must be a string, not an integer"},
		{"# paths\nsecure_path = \"/usr/bin\"\n", "/etc/pw/prod-write.toml:2: secure_path must be a list of strings, not a string"},
		{"[store]\nbackend = \"embedded\"\n\n[service]\nsocket = \"/run/pw.sock\"\nallow_root = \"yes\"\n", "/etc/pw/prod-write.toml:6: service.allow_root must be true or false, not a string"},
		{"[service]\nmcp_allow_run = 1\n", "/etc/pw/prod-write.toml:2: service.mcp_allow_run must be true or false, not an integer"},
		{"[archive]\nbucket = \"b\"\nlock_days = \"30\"\n", "/etc/pw/prod-write.toml:3: archive.lock_days must be an integer, not a string"},
		{"[bridge]\ngithub_repo = \"a/b\"\ngithub_pr = \"42\"\n", "/etc/pw/prod-write.toml:3: bridge.github_pr must be an integer, not a string"},
		{"[bridge]\ngithub_poll = 30\n", "/etc/pw/prod-write.toml:2: bridge.github_poll must be a string, not an integer"},
		{"pin = \"sha256:00\"\n", "/etc/pw/prod-write.toml:1: pin must be a table, not a string"},
		{"service.socket_mode = 0o660\n", "/etc/pw/prod-write.toml:1: service.socket_mode must be a string, not an integer"},
	} {
		_, err := config.Parse("/etc/pw/prod-write.toml", []byte(tc.src))
		var ce *config.Error
		if !errors.As(err, &ce) || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %s", tc.src, err, tc.want)
		}
	}
}
