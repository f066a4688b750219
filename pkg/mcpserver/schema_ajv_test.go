package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/testservers"
)

// ajvVersion is the ajv that scripts/test-deps.sh installs into
// .cache/node_modules; keep the two in step.
const ajvVersion = "8.20.0"

// schemaPatterns are registry patterns in Go's RE2 syntax, many of which
// mean nothing or something else in ECMA-262, each with whether its
// translation must reach the schema.
var schemaPatterns = []struct {
	re2        string
	translated bool
	samples    []string // beyond the shared corpus
}{
	{`[a-z][a-z0-9-]{0,30}`, true, []string{"api", "a-1", "1a", strings.Repeat("a", 31), strings.Repeat("a", 32)}},
	{`^[a-z][a-z0-9-]{0,30}$`, true, []string{"api", "api\n", "a-"}},
	{`(?i)[a-z]+`, true, []string{"Kelvin", "ſtate", "KELVIN"}},
	{`(?i)kelvin`, true, []string{"KELVIN", "Kelvin", "kelvin"}},
	{`(?i:é)x`, true, []string{"Éx", "éx", "eX"}},
	{`(?i)ß`, true, []string{"ß", "ẞ", "SS"}},
	{`[[:alpha:]]+`, true, []string{"abc", "a:", ":", "[:alpha:]"}},
	{`[[:^digit:]]*`, true, []string{"abc", "a1"}},
	{`[[:word:]]+[[:space:]][[:punct:]]+`, true, []string{"a_1 !?", "a\v!"}},
	{`\d+\z`, true, []string{"12", "12\n"}},
	{`\Aab\z`, true, []string{"ab", "ab\n", "\nab"}},
	{`(?P<year>\d{4})-(?P<month>\d{2})`, true, []string{"2024-01", "2024-1", "P<year>"}},
	{`(?:a|bc)+`, true, []string{"abca", "abcb"}},
	{`.+`, true, []string{"a\rb", "a\u2028b", "a\u2029", "a\nb"}},
	{`(?s).+`, true, []string{"a\nb", "\r\n"}},
	{`(?m)a$\n^b`, true, []string{"a\nb", "a\rb", "a\u2028b"}},
	{`\s+`, true, []string{" \t\n\r\f", "\v", "\u00a0", "\u2028", "\ufeff"}},
	{`\w+\b`, true, []string{"abc", "é", "a_1"}},
	{`\bfoo\B.*`, true, []string{"foox", "foo", "foo bar"}},
	{`[^/]+`, true, []string{"a/b", "😀", "\n"}},
	{`é|ü`, true, []string{"é", "ü", "e"}},
	{`😀+`, true, []string{"😀😀", "😀😁"}},
	{`x{2,3}y{2,}z?`, true, []string{"xxyy", "xxxyyyz", "xyy"}},
	{`a*?b+?`, true, []string{"aab", "b"}},
	{`\Qa.b*c\E`, true, []string{"a.b*c", "axbbc"}},
	{`[\]\-\\^]+`, true, []string{`]-\^`, "a"}},
	{`\x{2028}|\r`, true, []string{"\u2028", "\r"}},
	{`[{}()|$^.*+?/]+`, true, []string{"{}", "a"}},
	{`(?U)a+`, true, []string{"aaa"}},
	{`[^\x00-\x{FFFF}]`, true, []string{"😀", "a"}},
	{`\\u0041`, true, []string{`\u0041`, "A"}},
	{`\pL+`, false, []string{"abc", "日本"}},
	{`\p{Greek}+`, false, []string{"αβγ"}},
	{`\PL`, false, nil},
	{`[\p{Lu}\d]+`, false, nil},
	{`[😀-😎]`, false, []string{"😀"}},
	{`(?i)\x{10400}`, false, nil},
	{`(?i)` + strings.Repeat("abcdefghij", 30), false, nil},
}

// corpus is what every pattern is tried on besides its own samples: every
// string of at most two characters from an alphabet of characters that
// RE2 and ECMA-262 classes, anchors, dots and case folding disagree on.
func corpus() []string {
	alphabet := []string{"a", "z", "A", "K", "k", "\u212a", "s", "\u017f", "0", "9", "_", "-", ".", "/", " ",
		"\t", "\n", "\r", "\v", "\f", "\u2028", "\u00a0", "\u00e9", "\u00c9", "\u0394", "😀", "\\"}
	out := []string{""}
	for _, a := range alphabet {
		out = append(out, a)
		for _, b := range alphabet {
			out = append(out, a+b)
		}
	}
	return out
}

// patternRegistry is a registry of one operation whose string params carry
// schemaPatterns, and whose other params (an integer with a pattern, an
// enum) and file fill in the rest of a plan tool's schema.
func patternRegistry(t *testing.T) *operations.Registry {
	t.Helper()
	var b strings.Builder
	b.WriteString("[[operation]]\nname = \"patterns\"\nprogram = \"true\"\ntargets = [\"staging\", \"production\"]\n")
	for i, p := range schemaPatterns {
		fmt.Fprintf(&b, "[operation.params.p%02d]\ndescription = \"param %d\"\npattern = %s\n", i, i, tomlString(p.re2))
	}
	b.WriteString("[operation.params.count]\nmin = 1\nmax = 9\npattern = \"[1-9]\"\n")
	b.WriteString("[operation.params.region]\nenum = [\"eu\", \"us\"]\n")
	b.WriteString("[operation.files.config]\nmax_size = \"1KiB\"\n")
	b.WriteString("\n[[operation]]\nname = \"inspect\"\nmutating = false\nprogram = \"true\"\ntargets = [\"staging\"]\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ops.toml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := operations.Load(dir, []string{"/usr/bin", "/bin"})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// tomlString quotes s as a TOML literal string when it can, else a basic one.
func tomlString(s string) string {
	if !strings.ContainsAny(s, "'\n") {
		return "'" + s + "'"
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// ajvScript compiles every tool's input schema, and each param schema it is
// given, with ajv's JSON Schema 2020-12 validator in strict mode, and
// reports what ajv says of each value: with the u flag, as JSON Schema
// says patterns are built and ajv builds them by default, and without it,
// as some validators still do.
const ajvScript = `
const fs = require("fs");
const Ajv2020 = require("ajv/dist/2020");
const req = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const ajv = (u) => new Ajv2020({strict: true, allErrors: true, unicodeRegExp: u});
const msg = (e) => String(e && e.message || e);
const out = {version: require("ajv/package.json").version, tools: {}, checks: []};
for (const t of req.tools) {
  out.tools[t.name] = "";
  for (const u of [true, false]) {
    try { ajv(u).compile(t.schema); }
    catch (e) { out.tools[t.name] += (u ? "" : "without the u flag: ") + msg(e); }
  }
}
for (const c of req.checks) {
  let validate, validateNoU;
  try { validate = ajv(true).compile(c.schema); validateNoU = ajv(false).compile(c.schema); }
  catch (e) { out.checks.push({error: msg(e)}); continue; }
  out.checks.push({valid: c.values.map((v) => validate(v)), validNoU: c.values.map((v) => validateNoU(v))});
}
process.stdout.write(JSON.stringify(out));
`

// Every tool's inputSchema, from a registry full of RE2 patterns, compiles
// in ajv (a JSON Schema validator of another language); each pattern that
// reaches a schema accepts and rejects in ajv exactly the values the
// registry's Go regexp does; each that cannot be translated is absent and
// stated in the param's description. With RE2 text copied into the schema,
// as before, ajv refused every plan tool's schema whole.
func TestSchemasCompileInAjv(t *testing.T) {
	node, modules := ajvOrSkip(t)

	reg := patternRegistry(t)
	b := &fakeBackend{reg: reg, pr: &approval.Principal{ID: "agent", Roles: []string{approval.RoleAgent}}}
	cs := connectStdio(t, b, mcpserver.Scope{AllowRun: true})
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	type tool struct {
		Name   string         `json:"name"`
		Schema map[string]any `json:"schema"`
	}
	type check struct {
		Schema any      `json:"schema"`
		Values []string `json:"values"`
	}
	var req struct {
		Tools  []tool  `json:"tools"`
		Checks []check `json:"checks"`
	}
	var params map[string]any
	for _, tl := range list.Tools {
		raw, _ := json.Marshal(tl.InputSchema)
		var s map[string]any
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		req.Tools = append(req.Tools, tool{tl.Name, s})
		if tl.Name == "plan_patterns" {
			params = s["properties"].(map[string]any)["params"].(map[string]any)["properties"].(map[string]any)
		}
	}
	if len(req.Tools) != 8 || params == nil {
		t.Fatalf("tools %v, plan_patterns params %v", req.Tools, params)
	}
	op, _ := reg.Get("patterns")
	base := corpus()
	type expect struct {
		name   string
		re2    string
		values []string
	}
	var expects []expect
	for i, p := range schemaPatterns {
		name := fmt.Sprintf("p%02d", i)
		ps := params[name].(map[string]any)
		pattern, has := ps["pattern"].(string)
		desc, _ := ps["description"].(string)
		if has != p.translated {
			t.Errorf("%s: pattern in the schema: %v (%q), want %v", p.re2, has, pattern, p.translated)
		}
		if !has {
			if want := "the RE2 pattern ^(?:" + p.re2 + ")$"; !strings.Contains(desc, want) || !strings.Contains(desc, "cannot state") {
				t.Errorf("%s: description %q does not say the server checks %s", p.re2, desc, want)
			}
			continue
		}
		if strings.Contains(pattern, "(?P<") || strings.Contains(pattern, "(?i") || strings.Contains(pattern, "[[:") || strings.Contains(pattern, `\z`) || strings.Contains(pattern, `\p`) {
			t.Errorf("%s: RE2 syntax in the schema's pattern %q", p.re2, pattern)
		}
		values := append(append([]string(nil), base...), p.samples...)
		req.Checks = append(req.Checks, check{ps, values})
		expects = append(expects, expect{name, p.re2, values})
	}

	dir := t.TempDir()
	in, script := filepath.Join(dir, "request.json"), filepath.Join(dir, "check.js")
	data, _ := json.Marshal(req)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(ajvScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, in)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var res struct {
		Version string            `json:"version"`
		Tools   map[string]string `json:"tools"`
		Checks  []struct {
			Error    string `json:"error"`
			Valid    []bool `json:"valid"`
			ValidNoU []bool `json:"validNoU"`
		} `json:"checks"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("ajv's answer: %v\n%s", err, stdout.String())
	}
	if res.Version != ajvVersion {
		t.Fatalf("ajv %s ran, want %s", res.Version, ajvVersion)
	}
	for _, tl := range req.Tools {
		if msg, ok := res.Tools[tl.Name]; !ok || msg != "" {
			t.Errorf("ajv cannot compile %s's inputSchema: %s", tl.Name, msg)
		}
	}
	if len(res.Checks) != len(expects) {
		t.Fatalf("%d checks answered, want %d", len(res.Checks), len(expects))
	}
	for i, e := range expects {
		c := res.Checks[i]
		if c.Error != "" {
			t.Errorf("%s: ajv cannot compile the param's schema: %s", e.re2, c.Error)
			continue
		}
		param := op.Params[e.name]
		disagree := 0
		for j, v := range e.values {
			goOK := param.Validate(v) == nil
			if c.Valid[j] != goOK {
				if disagree++; disagree <= 5 {
					t.Errorf("%s (schema pattern %q): %q: ajv says valid=%v, the registry %v", e.re2, params[e.name].(map[string]any)["pattern"], v, c.Valid[j], goOK)
				}
			}
			// Without the u flag a character beyond U+FFFF is two code
			// units; within the Basic Multilingual Plane the pattern
			// means the same.
			if c.ValidNoU[j] != goOK && !strings.ContainsFunc(v, func(r rune) bool { return r > 0xFFFF }) {
				if disagree++; disagree <= 5 {
					t.Errorf("%s (schema pattern %q): %q: ajv without the u flag says valid=%v, the registry %v", e.re2, params[e.name].(map[string]any)["pattern"], v, c.ValidNoU[j], goOK)
				}
			}
		}
	}
}

// ajvOrSkip returns node and the node_modules directory that holds ajv
// ajvVersion. When either is missing the test is skipped, loudly, or fails
// under PROD_WRITE_REQUIRE_SERVERS=1 (as make test sets it), as
// pkg/testservers does for its servers.
func ajvOrSkip(t *testing.T) (node, modules string) {
	t.Helper()
	root, err := testservers.Root()
	if err != nil {
		t.Fatal(err)
	}
	modules = filepath.Join(root, ".cache", "node_modules")
	node, err = exec.LookPath("node")
	if err != nil {
		ajvAbsent(t, "node (to run ajv)", "node on $PATH")
	}
	pkg := filepath.Join(modules, "ajv", "package.json")
	data, err := os.ReadFile(pkg)
	var meta struct {
		Version string `json:"version"`
	}
	if err != nil || json.Unmarshal(data, &meta) != nil || meta.Version != ajvVersion {
		ajvAbsent(t, "ajv "+ajvVersion, pkg)
	}
	return node, modules
}

func ajvAbsent(t *testing.T, what, where string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not installed (looked for %s). Install it with ./scripts/test-deps.sh (ajv %s from npm into .cache/)", what, where, ajvVersion)
	if os.Getenv(testservers.RequireEnv) == "1" {
		t.Fatalf("%s; %s=1, so this is a failure, not a skip", msg, testservers.RequireEnv)
	}
	banner := fmt.Sprintf("\n*** SKIPPED, NOT TESTED: %s of ./pkg/mcpserver/ ***\n*** %s ***\n*** Run it with: ./scripts/test-deps.sh && %s=1 go test ./pkg/mcpserver/ (or make test) ***\n\n",
		t.Name(), msg, testservers.RequireEnv)
	// go test shows a passing package's output only with -v: the terminal
	// hears of the skip too.
	fmt.Fprint(os.Stderr, banner)
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		fmt.Fprint(tty, banner)
		tty.Close()
	}
	// A file of the module (go test checks no other), modified just now
	// and read: go test caches no result that read one, so a skip is not
	// replayed later as a bare "ok".
	if root, err := testservers.Root(); err == nil {
		marker := filepath.Join(root, ".cache", "ajv-skipped")
		if os.MkdirAll(filepath.Dir(marker), 0o755) == nil && os.WriteFile(marker, []byte(banner), 0o644) == nil {
			os.ReadFile(marker)
		}
	}
	t.Skipf("SKIPPED, NOT TESTED: %s", msg)
}
