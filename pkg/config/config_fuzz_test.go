package config_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/prod-write/prod-write/pkg/config"
)

// FuzzParse: prod-write.toml's parser never panics; it either fails with a
// *config.Error or returns a configuration whose paths are absolute.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"registry = \"operations\"\ntrust = \"trust.toml\"\nstate = \"state\"\nrunner_key = \"keys/runner.key\"\n",
		"secure_path = [\"/usr/bin\"]\n[store]\nbackend = \"dynamodb\"\ntable = \"t\"\n",
		"[archive]\nbucket = \"b\"\nlock_mode = \"governance\"\nlock_days = 3\n",
		"[pin]\ntrust = \"sha256:00\"\n[bridge]\nlisten = \":8080\"\n",
		"nope = 1\n",
		"secure_path = [\"relative\"]\n",
		"[store]\nbackend = \"etcd\"\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		c, err := config.Parse("/etc/prod-write/prod-write.toml", []byte(data))
		if err != nil {
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *config.Error", err)
			}
			return
		}
		for _, p := range []string{c.Registry, c.Trust, c.State} {
			if !filepath.IsAbs(p) {
				t.Fatalf("path %q is not absolute", p)
			}
		}
		for _, d := range c.SecurePath {
			if !filepath.IsAbs(d) {
				t.Fatalf("secure_path entry %q is not absolute", d)
			}
		}
	})
}
