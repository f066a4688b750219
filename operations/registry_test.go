package operations_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// paramOp declares one param named p with the given TOML body, so Validate
// is exercised on params compiled the way the registry compiles them.
func paramOp(t *testing.T, body string) operations.Param {
	t.Helper()
	src := "[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = [\"t\"]\nargs = [\"{param.p}\"]\n\n[operation.params.p]\n" + body + "\n"
	op := parseOne(t, src)
	return op.Params["p"]
}

func TestParamValidate(t *testing.T) {
	type check struct {
		value string
		ok    bool
	}
	for _, tc := range []struct {
		name   string
		body   string
		checks []check
	}{
		{"pattern is anchored", `pattern = "b"`, []check{
			{"b", true}, {"abc", false}, {"ab", false}, {"bc", false}, {"bb", false}, {"", false},
		}},
		{"alternation is anchored as a whole", `pattern = "a|b"`, []check{
			{"a", true}, {"b", true}, {"ab", false}, {"xa", false}, {"bx", false},
		}},
		{"explicit anchors still work", `pattern = "^[a-z]+$"`, []check{
			{"abc", true}, {"abc\n", false}, {"\nabc", false}, {"ab c", false},
		}},
		{"shell metacharacters fall outside a class", `pattern = "[a-z][a-z0-9-]{0,30}"`, []check{
			{"api", true}, {"api;rm -rf /", false}, {"api$(id)", false}, {"api\nx", false}, {"-api", false},
		}},
		{"enum", `enum = ["fast", "slow"]`, []check{
			{"fast", true}, {"slow", true}, {"FAST", false}, {"fast ", false}, {" fast", false}, {"", false}, {"fas", false}, {"fastslow", false},
		}},
		{"integer range", "min = 1\nmax = 10", []check{
			{"1", true}, {"10", true}, {"5", true},
			{"0", false}, {"11", false}, {"-1", false},
			{"007", false}, {"01", false}, {"+1", false}, {"-0", false}, {" 1", false}, {"1 ", false},
			{"1.0", false}, {"0x1", false}, {"1e1", false}, {"", false}, {"one", false},
			{"9223372036854775808", false}, {"18446744073709551617", false}, {"-9223372036854775809", false},
		}},
		{"negative minimum", "min = -5", []check{
			{"-5", true}, {"0", true}, {"9223372036854775807", true}, {"-6", false}, {"-0", false},
		}},
		{"integer without bounds", `type = "integer"`, []check{
			{"0", true}, {"-9223372036854775808", true}, {"9223372036854775807", true},
			{"9223372036854775808", false}, {"-9223372036854775809", false}, {"+0", false}, {"00", false},
		}},
		{"integer with enum", "min = 1\nmax = 5\nenum = [\"1\", \"2\"]", []check{
			{"1", true}, {"2", true}, {"3", false}, {"6", false},
		}},
		{"integer with pattern", "min = 0\nmax = 99999\npattern = \"[0-9]{3}\"", []check{
			{"123", true}, {"12", false}, {"1234", false}, {"012", false},
		}},
		{"plain string", ``, []check{
			{"anything at all", true}, {"", true}, {"é ☃ \t", true}, {"a\x00b", false}, {"\x00", false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := paramOp(t, tc.body)
			for _, c := range tc.checks {
				err := p.Validate(c.value)
				if c.ok && err != nil {
					t.Errorf("Validate(%q) = %v, want ok", c.value, err)
				}
				if !c.ok && err == nil {
					t.Errorf("Validate(%q) = nil, want an error", c.value)
				}
			}
		})
	}
}

// TestParamValidateUncompiled documents a trap in the exported API: a Param
// built in Go (not through Parse) with Min/Max but no Type.
func TestParamValidateUncompiled(t *testing.T) {
	ten := int64(10)
	for _, p := range []operations.Param{{Max: &ten}, {Max: &ten, Pattern: "[0-9]+"}} {
		if err := p.Validate("11"); err == nil {
			t.Errorf("Param%+v.Validate(\"11\") = nil, want above the maximum", p)
		}
	}
}

func TestParamDefinitionErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`type = "float"`, `type "float"`},
		{"min = 5\nmax = 1", "min 5 is above max 1"},
		{"type = \"string\"\nmin = 1", "min and max apply to integer params"},
		{`pattern = "(["`, "pattern"},
		{`min = "1"`, "p.toml:7: params.p.min must be an integer, not a string"},
	} {
		src := "[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = [\"t\"]\n\n[operation.params.p]\n" + tc.body + "\n"
		_, err := operations.Parse("p.toml", []byte(src))
		var de *operations.DefinitionError
		if !errors.As(err, &de) {
			t.Errorf("%q: error %v, want a *DefinitionError", tc.body, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || de.File != "p.toml" {
			t.Errorf("%q: error %q, want it to name p.toml and say %q", tc.body, err, tc.want)
		}
	}
}

func TestSizeUnmarshal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"512", 512, true},
		{"512B", 512, true},
		{"64KiB", 64 << 10, true},
		{"1MiB", 1 << 20, true},
		{"2GiB", 2 << 30, true},
		{" 1MiB ", 1 << 20, true},
		{"4611686018427387904", 1 << 62, true},
		{"4294967296GiB", 1 << 62, true},
		{"4611686018427387905", 0, false},
		{"4294967297GiB", 0, false},
		{"9223372036854775807", 0, false},
		{"99999999999999999999", 0, false},
		{"-1", 0, false},
		{"-1KiB", 0, false},
		{"1.5MiB", 0, false},
		{"1KB", 0, false},
		{"1kib", 0, false},
		{"1mib", 0, false},
		{"1TiB", 0, false},
		{"0x10", 0, false},
		{"MiB", 0, false},
		{"", 0, false},
		{"1 2", 0, false},
	} {
		var s operations.Size
		err := s.UnmarshalText([]byte(tc.in))
		switch {
		case tc.ok && err != nil:
			t.Errorf("Size %q: %v, want %d", tc.in, err, tc.want)
		case tc.ok && int64(s) != tc.want:
			t.Errorf("Size %q = %d, want %d", tc.in, s, tc.want)
		case !tc.ok && err == nil:
			t.Errorf("Size %q = %d, want an error", tc.in, s)
		}
	}
	// Round trip through the text form.
	b, _ := operations.Size(1 << 20).MarshalText()
	var s operations.Size
	if err := s.UnmarshalText(b); err != nil || s != 1<<20 {
		t.Errorf("round trip of 1MiB: %d, %v", s, err)
	}
}

func TestDurationUnmarshal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90s", 90 * time.Second, true},
		{"2m", 2 * time.Minute, true},
		{"1h", time.Hour, true},
		{"1h30m", 90 * time.Minute, true},
		{"1ms", time.Millisecond, true},
		{"0s", 0, false},
		{"0", 0, false},
		{"-1s", 0, false},
		{"1d", 0, false},
		{"60", 0, false},
		{"", 0, false},
		{"forever", 0, false},
	} {
		var d operations.Duration
		err := d.UnmarshalText([]byte(tc.in))
		switch {
		case tc.ok && err != nil:
			t.Errorf("Duration %q: %v", tc.in, err)
		case tc.ok && d.Duration != tc.want:
			t.Errorf("Duration %q = %v, want %v", tc.in, d.Duration, tc.want)
		case !tc.ok && err == nil:
			t.Errorf("Duration %q = %v, want an error", tc.in, d.Duration)
		}
	}
	// Through the registry: a bad timeout is a definition error.
	_, err := operations.Parse("d.toml", []byte("[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = [\"t\"]\ntimeout = \"1d\"\n"))
	if err == nil || !strings.Contains(err.Error(), "d.toml:5") {
		t.Errorf("timeout = \"1d\": error %v, want one naming d.toml:5", err)
	}
}

func writeExec(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestResolveProgram(t *testing.T) {
	root := t.TempDir()
	pathDir := filepath.Join(root, "path-bin")
	secure := filepath.Join(root, "secure-bin")
	writeExec(t, filepath.Join(pathDir, "pw-fake-tool"), 0o755)
	writeExec(t, filepath.Join(secure, "tool"), 0o755)
	writeExec(t, filepath.Join(secure, "plain"), 0o644)
	if err := os.MkdirAll(filepath.Join(secure, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeExec(t, filepath.Join(root, "rel", "tool"), 0o755)

	// The caller's PATH holds the program; the secure path does not.
	t.Setenv("PATH", pathDir)
	t.Chdir(root)

	for _, tc := range []struct {
		name    string
		program string
		secure  []string
		want    string // "" means an error
	}{
		{"PATH is never searched", "pw-fake-tool", []string{secure}, ""},
		{"an empty secure path finds nothing", "pw-fake-tool", nil, ""},
		{"found on the secure path", "tool", []string{"/nonexistent", secure}, filepath.Join(secure, "tool")},
		{"the first secure dir wins", "pw-fake-tool", []string{secure, pathDir}, filepath.Join(pathDir, "pw-fake-tool")},
		{"relative secure path entries are ignored", "tool", []string{"rel"}, ""},
		{"absolute path", filepath.Join(pathDir, "pw-fake-tool"), nil, filepath.Join(pathDir, "pw-fake-tool")},
		{"absolute path is cleaned", pathDir + "/../path-bin//pw-fake-tool", nil, filepath.Join(pathDir, "pw-fake-tool")},
		{"relative path with a slash", "rel/tool", []string{root}, ""},
		{"dot-slash path", "./rel/tool", []string{root}, ""},
		{"not executable", "plain", []string{secure}, ""},
		{"a directory", "adir", []string{secure}, ""},
		{"absolute but missing", filepath.Join(secure, "missing"), nil, ""},
		{"empty", "", []string{secure}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := operations.ResolveProgram(tc.program, tc.secure)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("ResolveProgram(%q, %q) = %q, want an error", tc.program, tc.secure, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ResolveProgram(%q, %q) = %q, %v; want %q", tc.program, tc.secure, got, err, tc.want)
			}
		})
	}

	// Load uses the same rule: an operation naming a program only the
	// caller's PATH has is unavailable on this host, named with the host
	// and the program, and Resolve refuses it; the rest of the registry
	// loads and resolves. A relative program path is still a definition
	// error naming file and line: it is wrong on every host.
	reg := t.TempDir()
	src := "# comment\n[[operation]]\nname = \"op\"\nprogram = \"pw-fake-tool\"\ntargets = [\"t\"]\n" +
		"[[operation]]\nname = \"other\"\nprogram = \"tool\"\ntargets = [\"t\"]\n"
	if err := os.WriteFile(filepath.Join(reg, "a.toml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := operations.LoadOn(reg, []string{secure}, "web-1")
	if err != nil {
		t.Fatalf("Load: %v, want the registry with op unavailable", err)
	}
	op, _ := r.Get("op")
	if op.ProgramPath != "" || !strings.Contains(op.Unavailable, "host web-1") || !strings.Contains(op.Unavailable, `"pw-fake-tool"`) {
		t.Fatalf("op: path %q, unavailable %q; want no path and the host and program named", op.ProgramPath, op.Unavailable)
	}
	_, err = r.Resolve(operations.Request{Operation: "op", Target: "t", Cwd: root}, operations.HashDigester{})
	if rf, ok := refusal.As(err); !ok || rf.Code != refusal.OperationUnavailable || !strings.Contains(rf.Reason, "web-1") {
		t.Fatalf("Resolve of the unavailable operation: %v, want operation_unavailable naming the host", err)
	}
	if _, err := r.Resolve(operations.Request{Operation: "other", Target: "t", Cwd: root}, operations.HashDigester{}); err != nil {
		t.Fatalf("Resolve of an available operation beside it: %v", err)
	}
	if err := os.WriteFile(filepath.Join(reg, "a.toml"), []byte("# comment\n[[operation]]\nname = \"op\"\nprogram = \"rel/tool\"\ntargets = [\"t\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = operations.Load(reg, []string{secure})
	var de *operations.DefinitionError
	if !errors.As(err, &de) || de.Line != 2 || !strings.HasSuffix(de.File, "a.toml") || !strings.Contains(err.Error(), "must be absolute") {
		t.Errorf("Load: %v, want a definition error at a.toml:2 about the relative path", err)
	}
}

// The operation's definition digest, the registry's digest and so every
// plan's fingerprint are the same on a host where an operation is
// unavailable as on one where it is not: the registry stays shared.
func TestUnavailableKeepsTheRegistryDigest(t *testing.T) {
	dir, bin := t.TempDir(), t.TempDir()
	writeExec(t, filepath.Join(bin, "psql"), 0o755)
	writeExec(t, filepath.Join(bin, "deploy"), 0o755)
	src := "[[operation]]\nname = \"db\"\nprogram = \"psql\"\ntargets = [\"t\"]\n[[operation]]\nname = \"web\"\nprogram = \"deploy\"\ntargets = [\"t\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "ops.toml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	dbHost, err := operations.LoadOn(dir, []string{bin}, "db-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(bin, "psql")); err != nil {
		t.Fatal(err)
	}
	webHost, err := operations.LoadOn(dir, []string{bin}, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := dbHost.Get("db")
	b, _ := webHost.Get("db")
	if a.Unavailable != "" || b.Unavailable == "" {
		t.Fatalf("unavailable: db-1 %q, web-1 %q", a.Unavailable, b.Unavailable)
	}
	if a.Digest != b.Digest || dbHost.Digest != webHost.Digest {
		t.Fatalf("digests differ between hosts: %s/%s, %s/%s", a.Digest, b.Digest, dbHost.Digest, webHost.Digest)
	}
	// A runner service's client learns the registry from `ops list
	// --json`: the unavailable operation decodes, keeps its digest, and
	// is still unavailable.
	data, err := json.Marshal(webHost.All())
	if err != nil {
		t.Fatal(err)
	}
	client, err := operations.Decode(data)
	if err != nil {
		t.Fatalf("Decode of a registry with an unavailable operation: %v", err)
	}
	if c, _ := client.Get("db"); client.Digest != webHost.Digest || c.Unavailable != b.Unavailable {
		t.Fatalf("decoded: digest %s (want %s), unavailable %q", client.Digest, webHost.Digest, c.Unavailable)
	}
}

// TestMutatingFlagDecides checks docs/DESIGN.md §3: the flag, never the name, decides,
// and an operation that does not say is mutating.
func TestMutatingFlagDecides(t *testing.T) {
	src := `
[[operation]]
name = "read-only-status"
description = "Read-only status (it says so, but the flag says otherwise)"
mutating = true
program = "true"
targets = ["staging"]

[[operation]]
name = "show-config"
description = "Show the config; mutating left out"
program = "true"
targets = ["staging"]

[[operation]]
name = "drop-database"
description = "Named like a write but declared read-only"
mutating = false
program = "true"
targets = ["staging"]
`
	ops, err := operations.Parse("m.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"read-only-status": true, "show-config": true, "drop-database": false}
	for _, op := range ops {
		op.ProgramPath = "/fake/true"
		if got := op.IsMutating(); got != want[op.Name] {
			t.Errorf("%s: IsMutating() = %v, want %v", op.Name, got, want[op.Name])
		}
		if op.Mutating == nil || *op.Mutating != want[op.Name] {
			t.Errorf("%s: Mutating not set to %v after Parse", op.Name, want[op.Name])
		}
		p, err := op.Resolve(operations.Request{Operation: op.Name, Target: "staging", Cwd: t.TempDir()},
			&fakeDigester{sums: map[string]string{"/fake/true": "sha256:" + strings.Repeat("0", 64)}})
		if err != nil {
			t.Fatal(err)
		}
		if p.Mutating != want[op.Name] {
			t.Errorf("%s: plan.Mutating = %v, want %v", op.Name, p.Mutating, want[op.Name])
		}
		js, _ := json.Marshal(p)
		if !strings.Contains(string(js), fmt.Sprintf(`"mutating":%v`, want[op.Name])) {
			t.Errorf("%s: plan JSON %s lacks \"mutating\":%v", op.Name, js, want[op.Name])
		}
	}
	// An Operation built without the flag at all (nil) is mutating too.
	if !(&operations.Operation{Name: "x"}).IsMutating() {
		t.Error("an operation with Mutating == nil is not mutating")
	}
	// Defaulting is part of the definition digest: leaving the flag out and
	// writing mutating = true are the same definition.
	a := parseOne(t, "[[operation]]\nname = \"a\"\nprogram = \"true\"\ntargets = [\"t\"]\n")
	b := parseOne(t, "[[operation]]\nname = \"a\"\nmutating = true\nprogram = \"true\"\ntargets = [\"t\"]\n")
	c := parseOne(t, "[[operation]]\nname = \"a\"\nmutating = false\nprogram = \"true\"\ntargets = [\"t\"]\n")
	if a.Digest != b.Digest {
		t.Errorf("default mutating and mutating = true have different digests: %s, %s", a.Digest, b.Digest)
	}
	if a.Digest == c.Digest {
		t.Errorf("mutating = false has the same digest as mutating = true")
	}
}

// TestParseErrors checks that each broken operation file is a
// *DefinitionError that names the file and, where it can, the line.
func TestParseErrors(t *testing.T) {
	head := "[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = [\"t\"]\n"
	for _, tc := range []struct {
		name string
		src  string
		line int
		want string
	}{
		{"unknown top-level key", head + "colour = \"red\"\n", 5, `unknown key "operation.colour"`},
		{"unknown key in a param", head + "[operation.params.p]\npattern = \"x\"\nflavour = \"y\"\n", 7, `unknown key "operation.params.p.flavour"`},
		{"unknown key in env", head + "[operation.env]\npass = [\"A\"]\ninherit = true\n", 7, `unknown key "operation.env.inherit"`},
		{"unknown key in the second operation", head + "\n[[operation]]\nname = \"two\"\nprogram = \"true\"\ntargets = [\"t\"]\nmutatin = false\n", 10, `unknown key "operation.mutatin"`},
		{"wrong type: string for a list", "[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = \"t\"\n", 4, "targets must be a list of strings, not a string"},
		{"wrong type: string for a bool", head + "mutating = \"no\"\n", 5, "mutating must be true or false, not a string"},
		{"wrong type: number for a size", head + "[operation.files.f]\nmax_size = 1.5\n", 6, `files.f.max_size must be a size such as "64KiB" or 1024, not a float`},
		{"TOML syntax", head + "args = [\n", 0, ""},
		{"undeclared param", head + "args = [\"{param.svc}\"]\n", 1, "{param.svc} names no declared param"},
		{"undeclared file", head + "args = [\"{file.cfg}\"]\n", 1, "{file.cfg} names no declared file"},
		{"undeclared param in env.set", head + "[operation.env]\nset = { A = \"{param.x}\" }\n", 1, "{param.x} names no declared param"},
		{"file in env.set", head + "[operation.files.f]\nmax_size = \"1KiB\"\n[operation.env]\nset = { A = \"{file.f}\" }\n", 1, "files cannot appear here"},
		{"file without max_size", head + "args = [\"{file.f}\"]\n[operation.files.f]\ndescription = \"x\"\n", 1, "max_size is required"},
		{"env in two kinds", head + "[operation.env]\npass = [\"A\"]\nsecret = [\"A\"]\n", 1, `"A" is in both`},
		{"bad env name", head + "[operation.env]\npass = [\"A-B\"]\n", 1, "not a variable name"},
		{"bad operation name", "[[operation]]\nname = \"Op\"\nprogram = \"true\"\ntargets = [\"t\"]\n", 1, "name must match"},
		{"no targets", "[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = []\n", 1, "targets"},
		{"no program", "[[operation]]\nname = \"op\"\ntargets = [\"t\"]\n", 1, "program is required"},
		{"relative cwd", head + "cwd = \"srv\"\n", 1, "must be absolute"},
		{"unknown approval path", head + "[operation.approval]\npaths = [\"yolo\"]\n", 1, `"yolo"`},
		{"empty approval paths", head + "[operation.approval]\npaths = []\n", 1, "nothing could ever approve it"},
		{"too many approvers", head + "[operation.approval]\napprovers = 17\n", 1, "approvers 17"},
		{"param and file share a name", head + "[operation.params.x]\n[operation.files.x]\nmax_size = \"1B\"\n", 1, "both a param and a file"},
		{"no operation", "# nothing here\n", 0, "declares no [[operation]]"},
		{"relative diff_against", head + "[operation.files.f]\nmax_size = \"1KiB\"\ndiff_against = \"etc/x.conf\"\n", 1, "must be an absolute, clean path"},
		{"unclean diff_against", head + "[operation.files.f]\nmax_size = \"1KiB\"\ndiff_against = \"/etc/../x.conf\"\n", 1, "must be an absolute, clean path"},
		{"diff_against naming a file", head + "[operation.files.f]\nmax_size = \"1KiB\"\ndiff_against = \"/etc/{file.f}\"\n", 1, "files cannot appear here"},
		{"diff_against naming no param", head + "[operation.files.f]\nmax_size = \"1KiB\"\ndiff_against = \"/etc/{param.site}\"\n", 1, "names no declared param"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := operations.Parse("ops/x.toml", []byte(tc.src))
			var de *operations.DefinitionError
			if !errors.As(err, &de) {
				t.Fatalf("Parse = %d ops, %v; want a *DefinitionError", len(ops), err)
			}
			if de.File != "ops/x.toml" || !strings.HasPrefix(err.Error(), "ops/x.toml:") {
				t.Errorf("error %q does not start with the file name", err)
			}
			if tc.line > 0 && de.Line != tc.line {
				t.Errorf("error %q: line %d, want %d", err, de.Line, tc.line)
			}
			if tc.line > 0 && !strings.HasPrefix(err.Error(), fmt.Sprintf("ops/x.toml:%d: ", tc.line)) {
				t.Errorf("error %q does not start with ops/x.toml:%d", err, tc.line)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestParseMisplacedLines records where Parse names the wrong line.
func TestParseMisplacedLines(t *testing.T) {
	for _, tc := range []struct {
		src  string
		line int
	}{
		{"[[ operation ]]\nname = \"a\"\nprogram = \"x\"\ntargets = [\"s\"]\n\n[[operation]]\nname = \"Bad\"\nprogram = \"x\"\ntargets = [\"s\"]\n", 6},
		{"[[operation]]\nname = \"a\"\ndescription = \"\"\"\n[[operation]]\n\"\"\"\nprogram = \"x\"\ntargets = [\"s\"]\n\n[[operation]]\nname = \"Bad\"\nprogram = \"x\"\ntargets = [\"s\"]\n", 9},
		{"[[operation]]\nname = \"a\"\ndescription = \"the nme = x\"\nprogram = \"x\"\ntargets = [\"s\"]\nnme = 1\n", 6},
	} {
		_, err := operations.Parse("f.toml", []byte(tc.src))
		var de *operations.DefinitionError
		if !errors.As(err, &de) || de.Line != tc.line {
			t.Errorf("error %v: want line %d", err, tc.line)
		}
	}
}

// TestParseMalformedPlaceholders: a placeholder that is almost right names
// no declared param and should be refused, not passed to the program as
// literal text.
func TestParseMalformedPlaceholders(t *testing.T) {
	for _, arg := range []string{"{param.my-svc}", "{ param.svc }", "{param.svc }", "{Param.svc}", "{file.}", "{param.}"} {
		src := "[[operation]]\nname = \"op\"\nprogram = \"true\"\ntargets = [\"t\"]\nargs = [\"" + arg + "\"]\n[operation.params.svc]\n"
		if _, err := operations.Parse("x.toml", []byte(src)); err == nil {
			t.Errorf("args = [%q] parsed; want an error", arg)
		}
	}
}

func TestLoadDuplicateAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	one := "[[operation]]\nname = \"dup\"\nprogram = \"/bin/sh\"\ntargets = [\"t\"]\n"
	two := "# second file\n\n[[operation]]\nname = \"other\"\nprogram = \"/bin/sh\"\ntargets = [\"t\"]\n\n[[operation]]\nname = \"dup\"\nprogram = \"/bin/sh\"\ntargets = [\"t\"]\n"
	for name, src := range map[string]string{"a.toml": one, "b.toml": two} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := operations.Load(dir, nil)
	var de *operations.DefinitionError
	if !errors.As(err, &de) {
		t.Fatalf("Load: %v, want a *DefinitionError", err)
	}
	if de.File != filepath.Join(dir, "b.toml") || de.Line != 8 || !strings.Contains(de.Msg, filepath.Join(dir, "a.toml")+":1") {
		t.Errorf("Load: %q; want it at b.toml:8 naming a.toml:1", err)
	}

	// Without the duplicate, both load, in name order, and the registry
	// digest follows every definition.
	if err := os.WriteFile(filepath.Join(dir, "b.toml"), []byte(strings.Replace(two, `"dup"`, `"zz-last"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := operations.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, op := range reg.All() {
		names = append(names, op.Name)
	}
	if got := strings.Join(names, ","); got != "dup,other,zz-last" {
		t.Errorf("All() = %s", got)
	}
	d1 := reg.Digest
	if err := os.WriteFile(filepath.Join(dir, "a.toml"), []byte(strings.Replace(one, `["t"]`, `["t", "u"]`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if reg, err = operations.Load(dir, nil); err != nil {
		t.Fatal(err)
	}
	if reg.Digest == d1 {
		t.Error("a definition changed but the registry digest did not")
	}
}

func TestRegistryResolveRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ops.toml"), []byte(resolveOps), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	writeExec(t, filepath.Join(bin, "deploy"), 0o755)
	reg, err := operations.Load(dir, []string{bin})
	if err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "small"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(cwd, "big")
	if err := os.WriteFile(big, make([]byte, 1<<20+1), 0o644); err != nil {
		t.Fatal(err)
	}
	good := func() operations.Request {
		return operations.Request{
			Operation: "push", Target: "staging", Params: map[string]string{"svc": "api", "n": "7"},
			Files: map[string]string{"cfg": "small", "extra": "small"}, Cwd: cwd,
		}
	}
	if _, err := reg.Resolve(good(), operations.HashDigester{}); err != nil {
		t.Fatalf("the good request: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*operations.Request)
		code   refusal.Code // "" means an *InputError
	}{
		{"unknown operation", func(r *operations.Request) { r.Operation = "nope" }, refusal.OperationAbsent},
		{"target not allowed", func(r *operations.Request) { r.Target = "prod" }, refusal.TargetNotAllowed},
		{"pattern", func(r *operations.Request) { r.Params["svc"] = "api1" }, refusal.ParamInvalid},
		{"range", func(r *operations.Request) { r.Params["n"] = "101" }, refusal.ParamInvalid},
		{"leading zero", func(r *operations.Request) { r.Params["n"] = "07" }, refusal.ParamInvalid},
		{"undeclared param", func(r *operations.Request) { r.Params["extra"] = "x" }, refusal.ParamInvalid},
		{"missing param", func(r *operations.Request) { delete(r.Params, "n") }, refusal.ParamInvalid},
		{"undeclared file", func(r *operations.Request) { r.Files["more"] = "small" }, refusal.ParamInvalid},
		{"missing file param", func(r *operations.Request) { delete(r.Files, "cfg") }, refusal.ParamInvalid},
		{"over max_size", func(r *operations.Request) { r.Files["cfg"] = big }, refusal.ParamInvalid},
		{"file does not exist", func(r *operations.Request) { r.Files["cfg"] = "missing" }, ""},
		{"file is a directory", func(r *operations.Request) { r.Files["cfg"] = "." }, ""},
		{"cwd does not exist", func(r *operations.Request) { r.Cwd = filepath.Join(cwd, "gone") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.change(&r)
			p, err := reg.Resolve(r, operations.HashDigester{})
			if err == nil {
				t.Fatalf("Resolve = %s, want a failure", p.Fingerprint)
			}
			if tc.code == "" {
				var ie *operations.InputError
				if !errors.As(err, &ie) {
					t.Errorf("error %v (%T), want an *InputError", err, err)
				}
				return
			}
			if !refusal.Is(err, tc.code) {
				t.Errorf("error %v, want refusal %s", err, tc.code)
			}
		})
	}
}

// TestHashDigesterFIFO: a file parameter that is a FIFO must be refused
// promptly, not block plan forever waiting for a writer.
func TestHashDigesterFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := operations.HashDigester{}.Digest("file", "cfg", fifo, 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO was hashed as a file parameter")
		}
	case <-time.After(2 * time.Second):
		// Unblock the open so the goroutine ends, then fail.
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
		t.Error("Digest blocked on a FIFO for 2s")
	}
}

// TestParseTypeErrorLines: a value of the wrong type is named at its own
// line, in words for people, whichever [[operation]] it is in.
// BurntSushi/toml names the line of the same key in the last operation
// (timeout = 60 on line 8 came out at line 33), and says "destination has
// type slice".
func TestParseTypeErrorLines(t *testing.T) {
	op := func(name, extra string) string {
		return "[[operation]]\nname = \"" + name + "\"\ndescription = \"restarts " + name + "\"\nprogram = \"true\"\nargs = [\"{target}\"]\n" + extra
	}
	// Lines 1-5 are the first operation's head; extra starts on line 6.
	tail := "\n" + op("b", "targets = [\"dev\"]\ntimeout = \"1m\"\n") + "\n" + op("c", "targets = [\"dev\"]\ntimeout = \"2m\"\n[operation.params.n]\nmin = 1\n[operation.files.f]\nmax_size = \"1KiB\"\n[operation.approval]\nttl = \"1h\"\napprovers = 1\n[operation.env]\npass = [\"A\"]\nset = { B = \"b\" }\n")
	for _, tc := range []struct {
		name, extra, want string
	}{
		{"duration as an integer", "targets = [\"dev\"]\nmutating = true\ntimeout = 60\n", `k8s.toml:8: timeout must be a duration string such as "2m", not an integer`},
		{"list as a string", "\ntargets = \"dev\"\n", `k8s.toml:7: targets must be a list of strings, not a string`},
		{"duration that is no duration", "targets = [\"dev\"]\ntimeout = \"2 minutes\"\n", `k8s.toml:7: timeout: invalid duration "2 minutes": want a Go duration such as "90s" or "2m"`},
		{"string as an integer", "targets = [\"dev\"]\nprogram2 = 1\nrun_as = 1000\n", `k8s.toml:8: run_as must be a string, not an integer`},
		{"string as a bool", "targets = [\"dev\"]\ncwd = true\n", `k8s.toml:7: cwd must be a string, not a boolean`},
		{"bool as a string", "targets = [\"dev\"]\nmutating = \"no\"\n", `k8s.toml:7: mutating must be true or false, not a string`},
		{"list item of the wrong type", "targets = [\"dev\", 2]\n", `k8s.toml:6: targets must be a list of strings, but item 2 is an integer`},
		{"list as a table", "targets = { dev = true }\n", `k8s.toml:6: targets must be a list of strings, not a table`},
		{"table as a string", "targets = [\"dev\"]\napproval = \"gera\"\n", `k8s.toml:7: approval must be a table, not a string`},
		{"map as a string", "targets = [\"dev\"]\n[operation.env]\nset = \"B=b\"\n", `k8s.toml:8: env.set must be a table, not a string`},
		{"map as a list", "targets = [\"dev\"]\nparams = [\"n\"]\n", `k8s.toml:7: params must be a table, not a list`},
		{"integer as a string", "targets = [\"dev\"]\n[operation.approval]\napprovers = \"2\"\n", `k8s.toml:8: approval.approvers must be an integer, not a string`},
		{"integer as a float", "targets = [\"dev\"]\n[operation.params.n]\nmin = 1.5\n", `k8s.toml:8: params.n.min must be an integer, not a float`},
		{"dotted duration", "targets = [\"dev\"]\napproval.ttl = 3600\n", `k8s.toml:7: approval.ttl must be a duration string such as "2m", not an integer`},
		{"size that is no size", "targets = [\"dev\"]\n\n[operation.files.f]\nmax_size = \"1 GB\"\n", `k8s.toml:9: files.f.max_size: invalid size "1 GB": want a number with an optional unit B, KiB, MiB or GiB`},
		{"size as a bool", "targets = [\"dev\"]\n[operation.files.f]\nmax_size = true\n", `k8s.toml:8: files.f.max_size must be a size such as "64KiB" or 1024, not a boolean`},
		{"inline table value", "targets = [\"dev\"]\nenv = { pass = \"A\" }\n", `k8s.toml:7: env.pass must be a list of strings, not a string`},
		{"env value", "targets = [\"dev\"]\n[operation.env.set]\nB = 2\n", `k8s.toml:8: env.set.B must be a string, not an integer`},
		{"param as a string", "targets = [\"dev\"]\n[operation.params]\nn = \"x\"\n", `k8s.toml:8: params.n must be a table, not a string`},
		{"enum as a string", "targets = [\"dev\"]\n[operation.params.n]\nenum = \"a\"\n", `k8s.toml:8: params.n.enum must be a list of strings, not a string`},
		{"the first of two errors", "targets = \"dev\"\ntimeout = 60\n", `k8s.toml:6: targets must be a list of strings, not a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := op("a", tc.extra) + tail
			_, err := operations.Parse("k8s.toml", []byte(src))
			var de *operations.DefinitionError
			if !errors.As(err, &de) || err.Error() != tc.want {
				t.Errorf("error %v\nwant       %s\nin:\n%s", err, tc.want, src)
			}
		})
	}
	// The last operation's values are there to mislead: it parses.
	if _, err := operations.Parse("k8s.toml", []byte(op("a", "targets = [\"dev\"]\n")+tail)); err != nil {
		t.Fatalf("control: %v", err)
	}
}

// TestParseTypeErrorInOperationArray: the top-level key itself of the
// wrong type, and operations written as an inline array.
func TestParseTypeErrorInOperationArray(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"# ops\noperation = \"restart\"\n", `x.toml:2: operation must be a list of tables, not a string`},
		{"operation = [\n  { name = \"a\", program = \"true\", targets = [\"t\"] },\n  { name = \"b\", program = \"true\", targets = \"t\" },\n]\n", `x.toml:3: targets must be a list of strings, not a string`},
	} {
		_, err := operations.Parse("x.toml", []byte(tc.src))
		if err == nil || err.Error() != tc.want {
			t.Errorf("error %v, want %s", err, tc.want)
		}
	}
}

// TestLoadNearMisses: a file whose name says TOML but does not end in
// .toml is not read, and the registry names it in a warning rather than
// leaving the operation silently missing.
func TestLoadNearMisses(t *testing.T) {
	dir := t.TempDir()
	def := "[[operation]]\nname = \"a\"\nprogram = \"/bin/true\"\ntargets = [\"t\"]\n"
	for _, name := range []string{"ops.toml", "k8s.TOML", "db.Toml", "old.toml.bak", "edit.toml~", "off.toml.disabled", "short.tml", "notes.txt", "README.md", ".#lock"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "archive.toml.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	reg, err := operations.Load(dir, config.DefaultSecurePath)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(reg.All()); n != 1 {
		t.Errorf("%d operations, want 1 (ops.toml only)", n)
	}
	var got []string
	for _, w := range reg.Warnings {
		if !strings.HasSuffix(w, " is not read: only files whose names end in .toml declare operations") {
			t.Errorf("warning %q", w)
		}
		got = append(got, filepath.Base(strings.Fields(w)[0]))
	}
	want := []string{"db.Toml", "edit.toml~", "k8s.TOML", "off.toml.disabled", "old.toml.bak", "short.tml"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("warnings name %v, want %v", got, want)
	}
	// A registry of .toml files only has no warnings.
	if err := os.MkdirAll(filepath.Join(dir, "clean"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "clean", "ops.toml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	if reg, err := operations.Load(filepath.Join(dir, "clean"), config.DefaultSecurePath); err != nil || reg.Warnings != nil {
		t.Errorf("clean registry: %v, warnings %q", err, reg.Warnings)
	}
}
