package operations_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

func addFiles(f *testing.F, pattern string) {
	f.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		f.Fatalf("no seed files match %s: %v", pattern, err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// placeholders finds {KIND.NAME} in s, where NAME is one or more of
// [A-Za-z0-9_], by scanning rather than by the registry's own regexp.
func placeholders(s, kind string) []string {
	var out []string
	open := "{" + kind + "."
	for i := 0; i < len(s); i++ {
		if !strings.HasPrefix(s[i:], open) {
			continue
		}
		j := i + len(open)
		k := j
		for k < len(s) && (s[k] == '_' || s[k] >= '0' && s[k] <= '9' || s[k] >= 'a' && s[k] <= 'z' || s[k] >= 'A' && s[k] <= 'Z') {
			k++
		}
		if k > j && k < len(s) && s[k] == '}' {
			out = append(out, s[j:k])
		}
	}
	return out
}

var opNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// FuzzParse: the registry parser never panics, every error is a
// *DefinitionError naming the file, and what it accepts is consistent:
// every placeholder names a declared param or file, defaults are applied,
// and the digest is the definition's.
func FuzzParse(f *testing.F) {
	addFiles(f, "testdata/registry/*.toml")
	for _, s := range []string{
		"",
		"[[operation]]\n",
		"[[operation]]\nname = \"a\"\nprogram = \"true\"\ntargets = [\"t\"]\n",
		"[[operation]]\nname = \"a\"\nprogram = \"true\"\ntargets = [\"t\"]\nargs = [\"{param.x}\"]\n",
		"[[operation]]\nname = \"a\"\nprogram = \"true\"\ntargets = [\"t\"]\nargs = [\"{param.x}{file.y}{target}\"]\n[operation.params.x]\n[operation.files.y]\nmax_size = \"1B\"\n",
		"[[operation]]\nname = \"a\"\nprogram = \"true\"\ntargets = [\"t\"]\n[operation.env]\nset = { A = \"{param.x}\" }\n",
		"[[operation]]\nname = \"a\"\nprogram = \"true\"\ntargets = [\"t\"]\n[operation.params.p]\nmin = 3\nmax = 1\n",
		"[[operation]]\nname = \"a\"\nprogram = \"true\"\ntargets = [\"t\"]\nbogus = 1\n",
		"[[ operation ]]\nname = \"a\"\nprogram = \"true\"\ntargets = [\"t\"]\n[[operation]]\nname = \"B\"\n",
		"operation = 1\n",
		"[operation]\nname = \"a\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ops, err := operations.Parse("fuzz.toml", data)
		if err != nil {
			var de *operations.DefinitionError
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *DefinitionError", err, err)
			}
			if de.File != "fuzz.toml" || !strings.HasPrefix(err.Error(), "fuzz.toml") || de.Line < 0 {
				t.Fatalf("error %q does not name fuzz.toml properly (line %d)", err, de.Line)
			}
			return
		}
		if len(ops) == 0 {
			t.Fatal("Parse accepted a file with no operation")
		}
		for _, op := range ops {
			if !opNameRE.MatchString(op.Name) {
				t.Fatalf("accepted operation name %q", op.Name)
			}
			if op.Mutating == nil {
				t.Fatalf("%s: mutating not defaulted", op.Name)
			}
			if op.Program == "" || len(op.Targets) == 0 {
				t.Fatalf("%s: accepted without program or targets", op.Name)
			}
			if len(op.Approval.Paths) == 0 || op.Approval.Approvers < 1 || op.Approval.Approvers > 16 {
				t.Fatalf("%s: approval %+v accepted", op.Name, op.Approval)
			}
			for _, p := range op.Approval.Paths {
				if p != operations.PathGera && p != operations.PathSmithTrinity {
					t.Fatalf("%s: approval path %q accepted", op.Name, p)
				}
			}
			if d, err := op.DefinitionDigest(); err != nil || d != op.Digest {
				t.Fatalf("%s: digest %q, definition gives %q (%v)", op.Name, op.Digest, d, err)
			}
			// Patterns are only parsed at load and compiled on first use:
			// what loads must compile.
			for name, p := range op.Params {
				if p.Pattern == "" {
					continue
				}
				if _, err := regexp.Compile(`^(?:` + p.Pattern + `)$`); err != nil {
					t.Fatalf("%s: param %s's pattern loaded but does not compile: %v", op.Name, name, err)
				}
			}
			for _, a := range op.Args {
				for _, n := range placeholders(a, "param") {
					if _, ok := op.Params[n]; !ok {
						t.Fatalf("%s: args %q reference undeclared param %q", op.Name, a, n)
					}
				}
				for _, n := range placeholders(a, "file") {
					if _, ok := op.Files[n]; !ok {
						t.Fatalf("%s: args %q reference undeclared file %q", op.Name, a, n)
					}
				}
			}
			for k, v := range op.Env.Set {
				for _, n := range placeholders(v, "param") {
					if _, ok := op.Params[n]; !ok {
						t.Fatalf("%s: env %s=%q references undeclared param %q", op.Name, k, v, n)
					}
				}
				if len(placeholders(v, "file")) > 0 {
					t.Fatalf("%s: env %s=%q references a file", op.Name, k, v)
				}
			}
			for n, fl := range op.Files {
				if fl.MaxSize <= 0 {
					t.Fatalf("%s: file %s accepted with max_size %d", op.Name, n, fl.MaxSize)
				}
			}
			params := map[string]string{}
			for n, p := range op.Params {
				if p.Type != "string" && p.Type != "integer" {
					t.Fatalf("%s: param %s has type %q", op.Name, n, p.Type)
				}
				// Validation must not panic whatever the value.
				for _, v := range []string{"", "0", "-1", "abc", string(data[:min(len(data), 16)])} {
					_ = p.Validate(v)
				}
				params[n] = "-"
			}
			// Expanding with every param and the target set to "-", which
			// cannot complete a placeholder, leaves no param placeholder:
			// one left over was in the template and never expanded.
			for _, a := range op.Argv("-", params, operations.FilePlaceholder)[1:] {
				if ph := placeholders(a, "param"); len(ph) > 0 {
					t.Fatalf("%s: %q still holds {param.%s} after expansion", op.Name, a, ph[0])
				}
			}
		}
		// Parsing is deterministic: the same bytes give the same digests.
		again, err := operations.Parse("fuzz.toml", data)
		if err != nil || len(again) != len(ops) {
			t.Fatalf("second Parse: %d ops, %v", len(again), err)
		}
		for i := range ops {
			if ops[i].Digest != again[i].Digest {
				t.Fatalf("%s: digest %s then %s", ops[i].Name, ops[i].Digest, again[i].Digest)
			}
		}
	})
}

// FuzzPlanCheck: decoding any JSON as a plan and checking it never panics,
// and Check succeeds exactly when the version is current and the recorded
// fingerprint is the one the recorded inputs give.
func FuzzPlanCheck(f *testing.F) {
	addFiles(f, "testdata/plans/*.json")
	if b, err := os.ReadFile("../testdata/vectors/fingerprint.json"); err == nil {
		var vs []struct {
			Bound       json.RawMessage `json:"bound"`
			Fingerprint string          `json:"fingerprint"`
		}
		if err := json.Unmarshal(b, &vs); err != nil {
			f.Fatal(err)
		}
		for _, v := range vs {
			f.Add([]byte(`{"version":1,"fingerprint":"` + v.Fingerprint + `",` + strings.TrimPrefix(string(v.Bound), "{")))
		}
	}
	for _, s := range []string{
		`{}`,
		`null`,
		`{"version":1}`,
		`{"version":1,"fingerprint":""}`,
		`{"version":2,"fingerprint":"sha256:00"}`,
		`{"version":1,"params":null,"env":null,"files":null,"argv":null}`,
		`{"version":1,"env":[{"name":"A","kind":"secret","value":"x"},{"name":"A","kind":"value","value":"y"}]}`,
		`{"version":1,"files":[{"name":"f","size":-1},{"name":"f","size":9223372036854775807}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p operations.Plan
		if err := json.Unmarshal(data, &p); err != nil {
			return
		}
		err := p.Check()
		want := p.Version == operations.PlanVersion && operations.Fingerprint(&p.Bound) == p.Fingerprint
		if (err == nil) != want {
			t.Fatalf("Check() = %v, but version %d and recomputed %s vs recorded %q", err, p.Version, operations.Fingerprint(&p.Bound), p.Fingerprint)
		}
		if err != nil && p.Version == operations.PlanVersion && !refusal.Is(err, refusal.FingerprintMismatch) {
			t.Fatalf("a current-version plan failed Check with %v, want fingerprint_mismatch", err)
		}
		if err != nil {
			return
		}
		// A plan that checks still checks after a round trip through
		// JSON: what is signed is what is verified.
		b, err := json.Marshal(&p)
		if err != nil {
			t.Fatal(err)
		}
		var q operations.Plan
		if err := json.Unmarshal(b, &q); err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		if err := q.Check(); err != nil {
			t.Fatalf("round trip broke the plan: %v\n%s", err, b)
		}
	})
}
