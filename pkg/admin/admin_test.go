package admin

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// tree lists every path below dir, relative to it.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var all []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			all = append(all, rel(dir, p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// init never overwrites: any one of the files it would write, planted
// first, makes it write nothing at all, and the refusal names that file.
func TestInitNeverOverwrites(t *testing.T) {
	for _, planted := range []string{"prod-write.toml", "trust.toml", "operations/config.toml", "keys/alice.key", "keys/runner.key"} {
		t.Run(planted, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, planted)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("mine\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			before := tree(t, dir)
			r, err := Init(InitRequest{Dir: dir, Demo: true})
			var ce *config.Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), p) || r != nil {
				t.Fatalf("got %v, %v; want a configuration error naming %s", r, err, p)
			}
			if after := tree(t, dir); !slices.Equal(before, after) {
				t.Errorf("init wrote %v (before: %v)", after, before)
			}
			if b, _ := os.ReadFile(p); string(b) != "mine\n" {
				t.Errorf("%s is now %q", planted, b)
			}
		})
	}
}

// What init says it wrote is what it wrote: each file exists, each demo
// key's public half is the key file's, and the trust policy it wrote
// parses and holds each key.
func TestInitResultIsWhatItWrote(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(t.TempDir(), "state")
	r, err := Init(InitRequest{Dir: dir, Demo: true, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if r.Dir != dir || r.State != state || r.FormatVersion != localapi.FormatVersion {
		t.Errorf("got dir %q state %q version %d", r.Dir, r.State, r.FormatVersion)
	}
	for _, f := range r.Files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if len(r.Keys) != len(DemoCast) {
		t.Fatalf("%d keys, want %d", len(r.Keys), len(DemoCast))
	}
	data, err := os.ReadFile(filepath.Join(dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approval.ParsePolicy("trust.toml", data); err != nil {
		t.Fatal(err)
	}
	for _, k := range r.Keys {
		pub, err := KeyPublic(filepath.Join(dir, k.Path))
		if err != nil {
			t.Fatal(err)
		}
		if pub.PublicKey != k.PublicKey || pub.KeyID != k.KeyID {
			t.Errorf("%s: result says %s, the file holds %s", k.Principal, k.PublicKey, pub.PublicKey)
		}
		if fi, err := os.Stat(filepath.Join(dir, k.Path)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v", k.Path, err, fi.Mode())
		}
		if !strings.Contains(string(data), k.PublicKey) {
			t.Errorf("trust.toml lacks %s's key", k.Principal)
		}
	}
	for _, d := range []string{"store/plans", "store/evidence", "store/consumed", "journal"} {
		if fi, err := os.Stat(filepath.Join(state, d)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v", d, err)
		}
	}
}

// keygen never replaces a key: the file another key is in stays as it was.
func TestKeygenNeverOverwrites(t *testing.T) {
	p := filepath.Join(t.TempDir(), "k.key")
	first, err := Keygen(p)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(p)
	if _, err := Keygen(p); localapi.ExitCode(err) != localapi.ExitDataErr || !strings.Contains(err.Error(), "never overwrites") {
		t.Fatalf("second keygen: %v (exit %d)", err, localapi.ExitCode(err))
	}
	after, _ := os.ReadFile(p)
	if string(before) != string(after) {
		t.Error("the key file changed")
	}
	pub, err := KeyPublic(p)
	if err != nil || pub.PublicKey != first.PublicKey {
		t.Errorf("key public: %v, %v; want %s", pub, err, first.PublicKey)
	}
	if _, err := Keygen(""); localapi.ExitCode(err) != localapi.ExitUsage {
		t.Errorf("keygen with no file: %v", err)
	}
}
