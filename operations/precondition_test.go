package operations_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/operations"
)

// TestPreconditionDefinitions: what a precondition may name
// (docs/adr/0025-preconditions.md).
// A check that writes, takes files, has a precondition itself, misses a
// target, or whose params do not match is a definition error with file and
// line; a good one loads.
func TestPreconditionDefinitions(t *testing.T) {
	check := func(extra string) string {
		return "[[operation]]\nname = \"ver\"\nmutating = false\nprogram = \"/bin/cat\"\nargs = [\"{param.svc}\"]\ntargets = [\"staging\", \"production\"]\n[operation.params.svc]\npattern = \"^[a-z]+$\"\n" + extra
	}
	deploy := func(pre string) string {
		return "\n[[operation]]\nname = \"deploy\"\nprogram = \"/bin/true\"\ntargets = [\"staging\"]\n[operation.params.service]\npattern = \"^[a-z]+$\"\n[operation.precondition]\n" + pre
	}
	good := `check = "ver"` + "\nparams = { svc = \"{param.service}\" }\n"
	for _, tc := range []struct{ name, src, want string }{
		{"good", check("") + deploy(good), ""},
		{"absent check", check("") + deploy(`check = "nope"`+"\n"), `check "nope" is not an operation`},
		{"mutating check", strings.Replace(check(""), "mutating = false", "mutating = true", 1) + deploy(good), "is mutating"},
		{"check with files", check("[operation.files.f]\nmax_size = \"1KiB\"\n") + deploy(good), "takes files"},
		{"target not allowed", strings.Replace(check(""), `"staging", `, "", 1) + deploy(good), `does not allow target "staging"`},
		{"param missing", check("") + deploy(`check = "ver"`+"\n"), `param "svc" of check "ver" is not given`},
		{"param unknown", check("") + deploy(good+"\n"), ""},
		{"param not declared", check("") + deploy(`check = "ver"`+"\nparams = { svc = \"x\", other = \"y\" }\n"), `declares no param "other"`},
		{"bad template", check("") + deploy(`check = "ver"`+"\nparams = { svc = \"{param.nope}\" }\n"), "names no declared param"},
		{"file template", check("") + deploy(`check = "ver"`+"\nparams = { svc = \"{file.x}\" }\n"), "files cannot appear here"},
		{"itself", check("") + deploy(`check = "deploy"`+"\n"), "names the operation itself"},
		{"unknown key", check("") + deploy(good+"cheque = \"x\"\n"), "cheque"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "ops.toml"), []byte(tc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			reg, err := operations.Load(dir, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				op, _ := reg.Get("deploy")
				name, params := op.PreconditionRequest("staging", map[string]string{"service": "api"})
				if name != "ver" || params["svc"] != "api" || len(params) != 1 {
					t.Errorf("PreconditionRequest = %s %v", name, params)
				}
				return
			}
			var de *operations.DefinitionError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) || de.File == "" {
				t.Fatalf("Load: %v, want a definition error saying %q", err, tc.want)
			}
		})
	}
}

// TestPreconditionKeepsDigests: a definition without a precondition hashes
// as it always did (its JSON has no "precondition" key, so every existing
// fingerprint stands), and adding one changes the digest.
func TestPreconditionKeepsDigests(t *testing.T) {
	src := "[[operation]]\nname = \"deploy\"\nprogram = \"/bin/true\"\ntargets = [\"staging\"]\n"
	ops, err := operations.Parse("a.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	def, _ := ops[0].DefinitionDigest()
	// The digest this definition had before preconditions existed (computed
	// at commit c978b58).
	const before = "sha256:d1562fe09258b2b408c3f52728d42f20c6c012e324d7170a598b5ec6f36b8eff"
	if def != before {
		t.Errorf("digest %s, was %s", def, before)
	}
	bare := *ops[0]
	bare.Precondition = &operations.Precondition{Check: "ver"}
	with, _ := bare.DefinitionDigest()
	if with == def {
		t.Error("a precondition does not change the definition's digest")
	}
}
