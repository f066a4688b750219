package operations_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/operations"
)

var fingerprintRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func digestGen() *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		b := rapid.SliceOfN(rapid.Byte(), 32, 32).Draw(t, "digest")
		return "sha256:" + hex.EncodeToString(b)
	})
}

var identRE = `[A-Za-z_][A-Za-z0-9_]{0,6}`

// boundGen draws any Bound that Resolve could produce, and more: strings
// are arbitrary, lists may be empty.
func boundGen() *rapid.Generator[operations.Bound] {
	return rapid.Custom(func(t *rapid.T) operations.Bound {
		b := operations.Bound{
			Operation:       rapid.StringMatching(`[a-z][a-z0-9-]{0,10}`).Draw(t, "operation"),
			OperationDigest: digestGen().Draw(t, "operation_digest"),
			Target:          rapid.String().Draw(t, "target"),
			Params:          rapid.MapOfN(rapid.StringMatching(identRE), rapid.String(), 0, 5).Draw(t, "params"),
			Argv:            rapid.SliceOfN(rapid.String(), 1, 6).Draw(t, "argv"),
			ProgramSHA256:   digestGen().Draw(t, "program_sha256"),
			Cwd:             "/" + rapid.String().Draw(t, "cwd"),
		}
		names := rapid.SliceOfNDistinct(rapid.StringMatching(identRE), 0, 6, rapid.ID[string]).Draw(t, "env_names")
		for _, n := range names {
			v := operations.EnvVar{Name: n, Kind: rapid.SampledFrom([]string{operations.EnvValue, operations.EnvSecret, operations.EnvUnset}).Draw(t, "kind")}
			if v.Kind == operations.EnvValue {
				v.Value = rapid.String().Draw(t, "value")
			}
			b.Env = append(b.Env, v)
		}
		files := rapid.SliceOfNDistinct(rapid.StringMatching(identRE), 0, 4, rapid.ID[string]).Draw(t, "file_names")
		for _, n := range files {
			b.Files = append(b.Files, operations.File{
				Name:   n,
				Path:   "/in/" + n,
				Size:   rapid.Int64Range(0, 1<<40).Draw(t, "size"),
				SHA256: digestGen().Draw(t, "file_sha256"),
			})
		}
		return b
	})
}

func cloneBound(b operations.Bound) operations.Bound {
	c := b
	c.Params = make(map[string]string, len(b.Params))
	for k, v := range b.Params {
		c.Params[k] = v
	}
	c.Argv = slices.Clone(b.Argv)
	c.Env = slices.Clone(b.Env)
	c.Files = slices.Clone(b.Files)
	return c
}

// other draws a string different from old.
func other(t *rapid.T, label, old string) string {
	s := rapid.String().Draw(t, label)
	if s == old {
		s += "x"
	}
	return s
}

// TestFingerprintBindsEveryInput changes one bound input at a time and
// checks that the fingerprint changes (docs/DESIGN.md §4). Every kind of change that
// applies to a drawn bound is made, each on its own copy: a kind drawn at
// random was drawn too rarely (rapid favours a list's first elements), and
// a fingerprint without the files' sizes passed a full mutants run.
func TestFingerprintBindsEveryInput(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := boundGen().Draw(t, "bound")
		before := operations.Fingerprint(&b)
		if !fingerprintRE.MatchString(before) {
			t.Fatalf("fingerprint %q is not sha256:<64 hex>", before)
		}

		var kinds []string
		kinds = append(kinds, "operation", "operation_digest", "argv_elem", "argv_append", "program", "cwd", "target", "param_add")
		if len(b.Argv) > 1 {
			kinds = append(kinds, "argv_drop")
		}
		if len(b.Params) > 0 {
			kinds = append(kinds, "param_value", "param_drop")
		}
		for _, e := range b.Env {
			if e.Kind == operations.EnvValue {
				kinds = append(kinds, "env_value")
				break
			}
		}
		if len(b.Env) > 0 {
			kinds = append(kinds, "env_kind", "env_drop")
		}
		if len(b.Files) > 0 {
			kinds = append(kinds, "file_size", "file_digest", "file_drop")
		}
		for _, kind := range kinds {
			changeOne(t, b, before, kind)
		}
	})
}

// changeOne makes the change kind on a copy of b, whose fingerprint is
// before, and fails unless the copy's fingerprint differs and b's has not
// moved.
func changeOne(t *rapid.T, b operations.Bound, before, kind string) {
	m := cloneBound(b)
	switch kind {
	case "operation":
		m.Operation = other(t, "new", m.Operation)
	case "operation_digest":
		m.OperationDigest = other(t, "new", m.OperationDigest)
	case "argv_elem":
		i := rapid.IntRange(0, len(m.Argv)-1).Draw(t, "i")
		m.Argv[i] = other(t, "new", m.Argv[i])
	case "argv_append":
		m.Argv = append(m.Argv, rapid.String().Draw(t, "new"))
	case "argv_drop":
		i := rapid.IntRange(0, len(m.Argv)-1).Draw(t, "i")
		m.Argv = slices.Delete(m.Argv, i, i+1)
	case "program":
		m.ProgramSHA256 = other(t, "new", m.ProgramSHA256)
	case "cwd":
		m.Cwd = other(t, "new", m.Cwd)
	case "target":
		m.Target = other(t, "new", m.Target)
	case "param_add":
		k := rapid.StringMatching(identRE).Draw(t, "k")
		if _, ok := m.Params[k]; ok {
			m.Params[k] = other(t, "new", m.Params[k])
		} else {
			m.Params[k] = rapid.String().Draw(t, "new")
		}
	case "param_value":
		k := rapid.SampledFrom(sortedKeys(m.Params)).Draw(t, "k")
		m.Params[k] = other(t, "new", m.Params[k])
	case "param_drop":
		k := rapid.SampledFrom(sortedKeys(m.Params)).Draw(t, "k")
		delete(m.Params, k)
	case "env_value":
		var idx []int
		for i, e := range m.Env {
			if e.Kind == operations.EnvValue {
				idx = append(idx, i)
			}
		}
		i := rapid.SampledFrom(idx).Draw(t, "i")
		m.Env[i].Value = other(t, "new", m.Env[i].Value)
	case "env_kind":
		i := rapid.IntRange(0, len(m.Env)-1).Draw(t, "i")
		old := m.Env[i].Kind
		kinds := slices.DeleteFunc([]string{operations.EnvValue, operations.EnvSecret, operations.EnvUnset}, func(k string) bool { return k == old })
		m.Env[i].Kind = rapid.SampledFrom(kinds).Draw(t, "kind")
	case "env_drop":
		i := rapid.IntRange(0, len(m.Env)-1).Draw(t, "i")
		m.Env = slices.Delete(m.Env, i, i+1)
	case "file_size":
		i := rapid.IntRange(0, len(m.Files)-1).Draw(t, "i")
		m.Files[i].Size += rapid.Int64Range(1, 1<<20).Draw(t, "delta")
	case "file_digest":
		i := rapid.IntRange(0, len(m.Files)-1).Draw(t, "i")
		m.Files[i].SHA256 = other(t, "new", m.Files[i].SHA256)
	case "file_drop":
		i := rapid.IntRange(0, len(m.Files)-1).Draw(t, "i")
		m.Files = slices.Delete(m.Files, i, i+1)
	}
	if after := operations.Fingerprint(&m); after == before {
		t.Fatalf("changing %s left the fingerprint at %s", kind, before)
	}
	// The original must not have been touched by the mutation.
	if again := operations.Fingerprint(&b); again != before {
		t.Fatalf("fingerprint of the unchanged bound moved: %s then %s", before, again)
	}
}

// TestFingerprintIgnoresOrder checks that the order in which params, env
// and files are given does not matter, nor what is not bound: the value of
// a secret or unset variable and the path a file was read from.
func TestFingerprintIgnoresOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := boundGen().Draw(t, "bound")
		want := operations.Fingerprint(&b)

		m := cloneBound(b)
		m.Env = rapid.Permutation(m.Env).Draw(t, "env_order")
		m.Files = rapid.Permutation(m.Files).Draw(t, "files_order")
		// A map has no order, but insert in a drawn one anyway so nothing
		// can depend on how the map was built.
		keys := rapid.Permutation(sortedKeys(b.Params)).Draw(t, "param_order")
		m.Params = map[string]string{}
		for _, k := range keys {
			m.Params[k] = b.Params[k]
		}
		for i := range m.Env {
			if m.Env[i].Kind != operations.EnvValue {
				m.Env[i].Value = rapid.String().Draw(t, "ignored_value")
			}
		}
		for i := range m.Files {
			m.Files[i].Path = rapid.String().Draw(t, "ignored_path")
		}
		if got := operations.Fingerprint(&m); got != want {
			t.Fatalf("reordering changed the fingerprint: %s, was %s", got, want)
		}
	})
}

// TestFingerprintFieldBoundaries checks that bytes moving from one field or
// list element to the next change the fingerprint: the encoding is
// length-prefixed, not concatenated.
func TestFingerprintFieldBoundaries(t *testing.T) {
	base := operations.Bound{
		Operation: "op", OperationDigest: "sha256:00", Target: "t",
		Params: map[string]string{}, Argv: []string{"/bin/x", "ab", "c"},
		ProgramSHA256: "sha256:11", Cwd: "/w",
	}
	pairs := []struct {
		name string
		a, b func(*operations.Bound)
	}{
		{"argv split", func(b *operations.Bound) {}, func(b *operations.Bound) { b.Argv = []string{"/bin/x", "a", "bc"} }},
		{"argv joined", func(b *operations.Bound) {}, func(b *operations.Bound) { b.Argv = []string{"/bin/x", "abc"} }},
		{"argv empty element", func(b *operations.Bound) { b.Argv = []string{"/bin/x"} }, func(b *operations.Bound) { b.Argv = []string{"/bin/x", ""} }},
		{"param key/value boundary", func(b *operations.Bound) { b.Params = map[string]string{"ab": "c"} }, func(b *operations.Bound) { b.Params = map[string]string{"a": "bc"} }},
		{"param vs argv", func(b *operations.Bound) { b.Params = map[string]string{"a": "b"} }, func(b *operations.Bound) { b.Argv = append(b.Argv, "a", "b") }},
		{"cwd/target boundary", func(b *operations.Bound) { b.Cwd, b.Target = "/wt", "" }, func(b *operations.Bound) { b.Cwd, b.Target = "/w", "t" }},
		{"env secret vs unset", func(b *operations.Bound) {
			b.Env = []operations.EnvVar{{Name: "A", Kind: operations.EnvSecret}}
		}, func(b *operations.Bound) { b.Env = []operations.EnvVar{{Name: "A", Kind: operations.EnvUnset}} }},
		{"env empty value vs unset", func(b *operations.Bound) {
			b.Env = []operations.EnvVar{{Name: "A", Kind: operations.EnvValue, Value: ""}}
		}, func(b *operations.Bound) { b.Env = []operations.EnvVar{{Name: "A", Kind: operations.EnvUnset}} }},
		{"file size 1 vs 10", func(b *operations.Bound) {
			b.Files = []operations.File{{Name: "f", Size: 1, SHA256: "sha256:0"}}
		}, func(b *operations.Bound) { b.Files = []operations.File{{Name: "f", Size: 10, SHA256: "sha256:"}} }},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			a, b := cloneBound(base), cloneBound(base)
			p.a(&a)
			p.b(&b)
			if operations.Fingerprint(&a) == operations.Fingerprint(&b) {
				t.Errorf("%+v and %+v share a fingerprint", a, b)
			}
		})
	}
}

// fakeDigester returns a fixed size and digest per path, without reading
// anything, and counts calls.
type fakeDigester struct {
	sums  map[string]string
	sizes map[string]int64
}

func (d *fakeDigester) Digest(kind, name, path string, max int64) (int64, string, error) {
	sum, ok := d.sums[path]
	if !ok {
		return 0, "", fmt.Errorf("fake digester: no %s %s at %s", kind, name, path)
	}
	size := d.sizes[path]
	if max >= 0 && size > max {
		return 0, "", &operations.TooLargeError{Path: path, Max: max}
	}
	return size, sum, nil
}

const resolveOps = `
[[operation]]
name = "push"
program = "deploy"
args = ["--svc={param.svc}", "--n={param.n}", "{file.cfg}", "{file.extra}", "--to={target}"]
targets = ["staging", "production"]

[operation.params.svc]
pattern = "[a-z]+"

[operation.params.n]
min = 1
max = 100

[operation.files.cfg]
max_size = "1MiB"

[operation.files.extra]
max_size = "1MiB"

[operation.env]
pass = ["REGION", "ZONE"]
secret = ["TOKEN", "API_KEY"]
set = { APP_ENV = "{target}" }
`

func parseOne(t testing.TB, src string) *operations.Operation {
	t.Helper()
	ops, err := operations.Parse("test.toml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(ops) != 1 {
		t.Fatalf("Parse: %d operations, want 1", len(ops))
	}
	return ops[0]
}

// TestResolveSecretsAndOrder resolves one request under drawn secret values,
// map orders and pass values: the fingerprint follows the pass values and
// never the secrets, which appear nowhere in the plan.
func TestResolveSecretsAndOrder(t *testing.T) {
	op := parseOne(t, resolveOps)
	op.ProgramPath = "/fake/bin/deploy"
	cwd := t.TempDir()
	d := &fakeDigester{
		sums: map[string]string{
			"/fake/bin/deploy":             "sha256:" + strings.Repeat("a", 64),
			filepath.Join(cwd, "cfg.toml"): "sha256:" + strings.Repeat("b", 64),
			"/abs/extra.bin":               "sha256:" + strings.Repeat("c", 64),
		},
		sizes: map[string]int64{filepath.Join(cwd, "cfg.toml"): 10, "/abs/extra.bin": 20},
	}
	resolve := func(t *rapid.T, params, files map[string]string, env map[string]string) *operations.Plan {
		p, err := op.Resolve(operations.Request{
			Operation: "push", Target: "staging", Params: params, Files: files, Cwd: cwd,
			Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		}, d)
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		return p
	}
	rapid.Check(t, func(t *rapid.T) {
		region := rapid.StringMatching(`[a-z0-9-]{0,12}`).Draw(t, "region")
		env := func(label string) map[string]string {
			m := map[string]string{"REGION": region, "ZONE": "z1"}
			// Distinctive secret values, so finding one in the plan is no
			// coincidence.
			m["TOKEN"] = "SECRET-TOKEN-" + rapid.StringMatching(`[A-Za-z0-9]{8,16}`).Draw(t, label+"_token")
			if rapid.Bool().Draw(t, label+"_api_key_set") {
				m["API_KEY"] = "SECRET-KEY-" + rapid.StringMatching(`[A-Za-z0-9]{8,16}`).Draw(t, label+"_api_key")
			}
			return m
		}
		ordered := func(label string, pairs [][2]string) map[string]string {
			m := map[string]string{}
			for _, kv := range rapid.Permutation(pairs).Draw(t, label) {
				m[kv[0]] = kv[1]
			}
			return m
		}
		params := [][2]string{{"svc", "api"}, {"n", "7"}}
		files := [][2]string{{"cfg", "cfg.toml"}, {"extra", "/abs/extra.bin"}}

		env1, env2 := env("first"), env("second")
		p1 := resolve(t, ordered("params1", params), ordered("files1", files), env1)
		p2 := resolve(t, ordered("params2", params), ordered("files2", files), env2)
		if p1.Fingerprint != p2.Fingerprint {
			t.Fatalf("secret values or map order changed the fingerprint: %s vs %s", p1.Fingerprint, p2.Fingerprint)
		}
		for _, p := range []*operations.Plan{p1, p2} {
			js, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range []map[string]string{env1, env2} {
				for _, k := range []string{"TOKEN", "API_KEY"} {
					if v, ok := e[k]; ok && strings.Contains(string(js), v) {
						t.Fatalf("secret %s's value is in the plan: %s", k, js)
					}
				}
			}
			if err := p.Check(); err != nil {
				t.Fatalf("Check of a fresh plan: %v", err)
			}
		}
		// Control: a pass variable is bound by value.
		env3 := env("third")
		env3["REGION"] = region + "-other"
		if p3 := resolve(t, ordered("params3", params), ordered("files3", files), env3); p3.Fingerprint == p1.Fingerprint {
			t.Fatalf("pass variable REGION changed but the fingerprint did not")
		}
		// And unset differs from set-to-empty.
		env4 := env("fourth")
		delete(env4, "ZONE")
		env5 := env("fifth")
		env5["ZONE"] = ""
		p4 := resolve(t, ordered("params4", params), ordered("files4", files), env4)
		p5 := resolve(t, ordered("params5", params), ordered("files5", files), env5)
		if p4.Fingerprint == p5.Fingerprint {
			t.Fatalf("ZONE unset and ZONE=\"\" share a fingerprint")
		}
	})
}

// TestResolveBindsDigests checks through Resolve and a fake digester that
// the program's and each file's digest and size reach the fingerprint.
func TestResolveBindsDigests(t *testing.T) {
	op := parseOne(t, resolveOps)
	op.ProgramPath = "/fake/bin/deploy"
	cwd := t.TempDir()
	cfg := filepath.Join(cwd, "cfg.toml")
	newDigester := func() *fakeDigester {
		return &fakeDigester{
			sums:  map[string]string{"/fake/bin/deploy": "sha256:" + strings.Repeat("a", 64), cfg: "sha256:" + strings.Repeat("b", 64), "/abs/extra.bin": "sha256:" + strings.Repeat("c", 64)},
			sizes: map[string]int64{cfg: 10, "/abs/extra.bin": 20},
		}
	}
	req := operations.Request{
		Operation: "push", Target: "staging", Params: map[string]string{"svc": "api", "n": "7"},
		Files: map[string]string{"cfg": "cfg.toml", "extra": "/abs/extra.bin"}, Cwd: cwd,
	}
	base, err := op.Resolve(req, newDigester())
	if err != nil {
		t.Fatal(err)
	}
	changes := map[string]func(d *fakeDigester, r *operations.Request){
		"program digest": func(d *fakeDigester, r *operations.Request) {
			d.sums["/fake/bin/deploy"] = "sha256:" + strings.Repeat("d", 64)
		},
		"file digest":   func(d *fakeDigester, r *operations.Request) { d.sums[cfg] = "sha256:" + strings.Repeat("e", 64) },
		"file size":     func(d *fakeDigester, r *operations.Request) { d.sizes["/abs/extra.bin"] = 21 },
		"param value":   func(d *fakeDigester, r *operations.Request) { r.Params = map[string]string{"svc": "web", "n": "7"} },
		"integer param": func(d *fakeDigester, r *operations.Request) { r.Params = map[string]string{"svc": "api", "n": "8"} },
		"target":        func(d *fakeDigester, r *operations.Request) { r.Target = "production" },
		"cwd": func(d *fakeDigester, r *operations.Request) {
			r.Cwd = t.TempDir()
			d.sums[filepath.Join(r.Cwd, "cfg.toml")], d.sizes[filepath.Join(r.Cwd, "cfg.toml")] = d.sums[cfg], d.sizes[cfg]
		},
		"operation def": func(d *fakeDigester, r *operations.Request) {},
		"files swapped": func(d *fakeDigester, r *operations.Request) {
			d.sums[cfg], d.sums["/abs/extra.bin"] = d.sums["/abs/extra.bin"], d.sums[cfg]
		},
		"pass var is set": func(d *fakeDigester, r *operations.Request) {
			r.Getenv = func(k string) (string, bool) { return "eu", k == "REGION" }
		},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			d, r := newDigester(), req
			change(d, &r)
			o := op
			if name == "operation def" {
				o = parseOne(t, strings.Replace(resolveOps, `"--to={target}"`, `"--target={target}"`, 1))
				o.ProgramPath = op.ProgramPath
			}
			p, err := o.Resolve(r, d)
			if err != nil {
				t.Fatal(err)
			}
			if p.Fingerprint == base.Fingerprint {
				t.Errorf("%s changed but the fingerprint did not", name)
			}
		})
	}
}

// TestResolveRealFiles resolves through the real HashDigester: one byte
// changed in a file parameter or in the program changes the fingerprint,
// and putting it back restores it.
func TestResolveRealFiles(t *testing.T) {
	bin := t.TempDir()
	prog := filepath.Join(bin, "deploy")
	progBytes := []byte("#!/bin/sh\necho deploying\n")
	if err := os.WriteFile(prog, progBytes, 0o755); err != nil {
		t.Fatal(err)
	}
	regDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(regDir, "ops.toml"), []byte(resolveOps), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := operations.Load(regDir, []string{bin})
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	cfg := filepath.Join(cwd, "cfg.toml")
	cfgBytes := []byte("[server]\nport = 8080\n")
	extra := filepath.Join(cwd, "extra.bin")
	extraBytes := []byte{0, 1, 2, 3, 255}
	for p, b := range map[string][]byte{cfg: cfgBytes, extra: extraBytes} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	req := operations.Request{
		Operation: "push", Target: "staging", Params: map[string]string{"svc": "api", "n": "7"},
		Files: map[string]string{"cfg": "cfg.toml", "extra": extra}, Cwd: cwd,
	}
	resolve := func() *operations.Plan {
		t.Helper()
		p, err := reg.Resolve(req, operations.HashDigester{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := resolve()
	if got, want := base.ProgramSHA256, sha256Hex(progBytes); got != want {
		t.Errorf("program digest %s, want %s", got, want)
	}
	if base.Argv[0] != prog {
		t.Errorf("argv[0] = %q, want the resolved %q", base.Argv[0], prog)
	}
	for _, f := range base.Files {
		want := map[string][]byte{"cfg": cfgBytes, "extra": extraBytes}[f.Name]
		if f.Size != int64(len(want)) || f.SHA256 != sha256Hex(want) {
			t.Errorf("file %s bound as %d bytes %s, want %d bytes %s", f.Name, f.Size, f.SHA256, len(want), sha256Hex(want))
		}
	}
	if again := resolve(); again.Fingerprint != base.Fingerprint {
		t.Fatalf("resolving twice gave %s then %s", base.Fingerprint, again.Fingerprint)
	}

	flip := func(path string, orig []byte, i int) {
		t.Helper()
		b := slices.Clone(orig)
		b[i] ^= 0x01
		if err := os.WriteFile(path, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		path string
		orig []byte
	}{{"config file", cfg, cfgBytes}, {"binary file", extra, extraBytes}, {"program", prog, progBytes}} {
		for _, i := range []int{0, len(tc.orig) / 2, len(tc.orig) - 1} {
			flip(tc.path, tc.orig, i)
			if got := resolve(); got.Fingerprint == base.Fingerprint {
				t.Errorf("%s: byte %d flipped (same size) but the fingerprint stayed %s", tc.name, i, got.Fingerprint)
			}
			if err := os.WriteFile(tc.path, tc.orig, 0o755); err != nil {
				t.Fatal(err)
			}
			if got := resolve(); got.Fingerprint != base.Fingerprint {
				t.Fatalf("%s: restoring the bytes did not restore the fingerprint", tc.name)
			}
		}
	}
	// A byte appended.
	if err := os.WriteFile(cfg, append(slices.Clone(cfgBytes), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := resolve(); got.Fingerprint == base.Fingerprint {
		t.Errorf("config file grew by a byte but the fingerprint stayed")
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
