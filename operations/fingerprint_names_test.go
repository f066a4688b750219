package operations_test

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/operations"
)

// TestFingerprintBindsEnvAndFileNames: renaming a variable or a file
// parameter, with its kind, value, size and digest kept, changes the
// fingerprint (docs/DESIGN.md §4 binds the names). TestFingerprintBindsEveryInput
// changes values and drops entries, which a fingerprint blind to names still
// notices; only a rename tells whether the name itself is bound: without it a
// plan made with API_URL=x would pass for one with PROXY_URL=x, and a secret
// TOKEN for a secret AWS_SECRET_ACCESS_KEY.
func TestFingerprintBindsEnvAndFileNames(t *testing.T) {
	base := func() operations.Bound {
		return operations.Bound{
			Operation: "op", OperationDigest: "sha256:00", Target: "t",
			Params: map[string]string{}, Argv: []string{"/bin/x", "{file.cfg}"},
			ProgramSHA256: "sha256:11", Cwd: "/w",
		}
	}
	for _, c := range []struct {
		name string
		a, b func(*operations.Bound)
	}{
		{"value variable renamed", func(b *operations.Bound) {
			b.Env = []operations.EnvVar{{Name: "API_URL", Kind: operations.EnvValue, Value: "x"}}
		}, func(b *operations.Bound) {
			b.Env = []operations.EnvVar{{Name: "PROXY_URL", Kind: operations.EnvValue, Value: "x"}}
		}},
		{"secret renamed", func(b *operations.Bound) {
			b.Env = []operations.EnvVar{{Name: "TOKEN", Kind: operations.EnvSecret}}
		}, func(b *operations.Bound) {
			b.Env = []operations.EnvVar{{Name: "AWS_SECRET_ACCESS_KEY", Kind: operations.EnvSecret}}
		}},
		{"unset variable renamed", func(b *operations.Bound) {
			b.Env = []operations.EnvVar{{Name: "A", Kind: operations.EnvUnset}}
		}, func(b *operations.Bound) {
			b.Env = []operations.EnvVar{{Name: "B", Kind: operations.EnvUnset}}
		}},
		{"file renamed", func(b *operations.Bound) {
			b.Files = []operations.File{{Name: "cfg", Size: 3, SHA256: "sha256:22"}}
		}, func(b *operations.Bound) {
			b.Files = []operations.File{{Name: "extra", Size: 3, SHA256: "sha256:22"}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := base(), base()
			c.a(&a)
			c.b(&b)
			if operations.Fingerprint(&a) == operations.Fingerprint(&b) {
				t.Errorf("%+v and %+v share a fingerprint", a, b)
			}
		})
	}

	rapid.Check(t, func(t *rapid.T) {
		b := boundGen().Draw(t, "bound")
		before := operations.Fingerprint(&b)
		m := cloneBound(b)
		var kinds []string
		if len(m.Env) > 0 {
			kinds = append(kinds, "env")
		}
		if len(m.Files) > 0 {
			kinds = append(kinds, "file")
		}
		if len(kinds) == 0 {
			t.Skip("nothing named to rename")
		}
		// The new name is one no other entry has: names stay distinct, as
		// Plan.Check requires.
		fresh := func(taken []string) string {
			n := rapid.StringMatching(identRE).Filter(func(s string) bool { return !slices.Contains(taken, s) }).Draw(t, "new_name")
			return n
		}
		switch kind := rapid.SampledFrom(kinds).Draw(t, "rename"); kind {
		case "env":
			var names []string
			for _, e := range m.Env {
				names = append(names, e.Name)
			}
			i := rapid.IntRange(0, len(m.Env)-1).Draw(t, "i")
			m.Env[i].Name = fresh(names)
		case "file":
			var names []string
			for _, f := range m.Files {
				names = append(names, f.Name)
			}
			i := rapid.IntRange(0, len(m.Files)-1).Draw(t, "i")
			m.Files[i].Name = fresh(names)
		}
		if operations.Fingerprint(&m) == before {
			t.Fatalf("renaming left the fingerprint at %s", before)
		}
	})
}
