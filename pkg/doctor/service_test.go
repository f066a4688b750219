package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
)

// What the runner service answers to ops list, judged against the
// registry on disk: each way the two differ is a warning naming the
// operations, a service that does not answer a note, and one that serves
// the same registry nothing.
func TestServiceRegistry(t *testing.T) {
	dir := t.TempDir()
	defs := "[[operation]]\nname = \"a\"\ndescription = \"a\"\nprogram = \"/bin/true\"\ntargets = [\"staging\"]\n" +
		"[[operation]]\nname = \"b\"\ndescription = \"b\"\nprogram = \"/bin/true\"\ntargets = [\"staging\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "ops.toml"), []byte(defs), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := operations.Load(dir, []string{"/bin", "/usr/bin"})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := reg.Get("a")
	b, _ := reg.Get("b")
	c := &config.Config{Registry: dir}
	c.Service.Socket = "/run/prod-write/s.sock"
	for _, tc := range []struct {
		name   string
		served map[string]string
		err    error
		reg    *operations.Registry
		check  string // "" for no finding
		names  string
	}{
		{"the same registry", map[string]string{"a": a.Digest, "b": b.Digest}, nil, reg, "", ""},
		{"an operation not served", map[string]string{"a": a.Digest}, nil, reg, "service-registry-differs", ": b"},
		{"an operation served that the registry lacks", map[string]string{"a": a.Digest, "b": b.Digest, "c": "sha256:00"}, nil, reg, "service-registry-differs", ": c"},
		{"another definition served", map[string]string{"a": "sha256:00", "b": b.Digest}, nil, reg, "service-registry-differs", ": a"},
		{"every way at once, sorted", map[string]string{"b": "sha256:00", "c": "sha256:00"}, nil, reg, "service-registry-differs", ": a, b, c"},
		{"no answer", nil, errors.New("connection refused"), reg, "service-unreachable", "connection refused"},
		{"no registry to compare", map[string]string{}, nil, nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Service(c, tc.served, tc.err, tc.reg)
			if tc.check == "" {
				if len(got) != 0 {
					t.Fatalf("findings %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].Check != tc.check {
				t.Fatalf("findings %+v, want one %s", got, tc.check)
			}
			want := Warning
			if tc.check == "service-unreachable" {
				want = Info
			}
			if got[0].Severity != want || !strings.HasSuffix(got[0].Message, tc.names) {
				t.Errorf("%s %q, want %s ending %q", got[0].Severity, got[0].Message, want, tc.names)
			}
		})
	}
}
