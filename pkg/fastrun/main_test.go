package fastrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every line fastrun does not make is the command tree's, and the tree is
// prod-write-cli beside this binary, given exactly the caller's arguments;
// an installation without it is a configuration error that names it, in
// the form the line asked for.
func TestExecTree(t *testing.T) {
	args := []string{"plan", "deploy", "--param", "x=$(id)", "--json"}
	var gotPath string
	var gotArgv []string
	exec := func(path string, argv, env []string) error {
		gotPath, gotArgv = path, argv
		return errors.New("exec format error")
	}
	self := func() (string, error) { return "/opt/pw/bin/prod-write", nil }
	var stderr bytes.Buffer
	code := execTree(args, self, exec, &stderr)
	if gotPath != "/opt/pw/bin/prod-write-cli" || !slices.Equal(gotArgv, append([]string{gotPath}, args...)) {
		t.Fatalf("exec %q %q; want prod-write-cli beside prod-write with the same arguments", gotPath, gotArgv)
	}
	var m map[string]any
	if err := json.Unmarshal(stderr.Bytes(), &m); err != nil || code != exitConfig || m["code"] != "config" || m["exit_code"] != float64(exitConfig) ||
		!strings.Contains(m["error"].(string), "prod-write-cli") || !strings.Contains(m["error"].(string), "exec format error") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}

	// Text without --json, and a binary named as the tree never execs
	// itself.
	stderr.Reset()
	gotPath = ""
	code = execTree([]string{"status", "sha256:ab"}, func() (string, error) { return "/x/prod-write-cli", nil }, exec, &stderr)
	if gotPath != "" || code != exitConfig || !strings.HasPrefix(stderr.String(), "prod-write: error: this command needs prod-write-cli") ||
		!strings.Contains(stderr.String(), "\nprod-write: hint: ") {
		t.Fatalf("exec %q, exit %d, stderr %q", gotPath, code, stderr.String())
	}
}

func TestWantsJSON(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"status", "--json"}, true},
		{[]string{"--json=true", "ops", "list"}, true},
		{[]string{"--json=false", "ops", "list"}, false},
		{[]string{"plan", "x", "--", "--json"}, false},
		{[]string{"plan"}, false},
	} {
		if got := wantsJSON(tc.args); got != tc.want {
			t.Errorf("wantsJSON(%q) = %v", tc.args, got)
		}
	}
}

// `prod-write` starts as a small program only while this package links
// nothing of the domain, the command tree or their heavy dependencies
// (docs/adr/0057-a-small-run-client.md): one import of pkg/api would
// bring them all back, and nothing else would say so.
func TestLinksNoDomain(t *testing.T) {
	out, err := osexec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/prod-write/prod-write/pkg/service") {
		t.Fatalf("go list -deps listed no pkg/service: %q", deps)
	}
	mod := "github.com/prod-write/prod-write/"
	allowed := map[string]bool{
		mod + "pkg/fastrun": true, mod + "pkg/service": true, mod + "pkg/config": true, mod + "pkg/runapi": true,
		mod + "pkg/refusal": true, mod + "pkg/tomlpos": true, mod + "pkg/units": true,
	}
	for _, d := range deps {
		switch {
		case strings.HasPrefix(d, mod) && !allowed[d],
			strings.HasPrefix(d, "github.com/") && !strings.HasPrefix(d, mod) && !strings.HasPrefix(d, "github.com/BurntSushi/toml"):
			t.Errorf("pkg/fastrun links %s", d)
		}
	}
}

// The small client's own packages run no fmt before main: neither a
// package variable's value nor an init function calls it. fmt's first
// call in a process runs its code cold, and one such variable (pkg/service's
// errEOF) cost the client's runs 0.25–0.5 ms each (docs/PERFORMANCE.md,
// "No fmt before main"); nothing else on the client's way to its request uses fmt.
func TestOwnPackagesCallNoFmtBeforeMain(t *testing.T) {
	out, err := osexec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Dir}} {{join .GoFiles \" \"}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[0], "github.com/prod-write/prod-write/") {
			continue
		}
		for _, name := range f[2:] {
			path := filepath.Join(f[1], name)
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, decl := range file.Decls {
				var before ast.Node // what runs before main
				switch d := decl.(type) {
				case *ast.GenDecl:
					if d.Tok == token.VAR {
						before = d
					}
				case *ast.FuncDecl:
					if d.Recv == nil && d.Name.Name == "init" {
						before = d
					}
				}
				if before == nil {
					continue
				}
				now := map[*ast.FuncLit]bool{} // function literals called where they stand
				ast.Inspect(before, func(n ast.Node) bool {
					if call, ok := n.(*ast.CallExpr); ok {
						if lit, ok := call.Fun.(*ast.FuncLit); ok {
							now[lit] = true
						}
					}
					if lit, ok := n.(*ast.FuncLit); ok && !now[lit] {
						return false // called later, if ever
					}
					if call, ok := n.(*ast.CallExpr); ok {
						if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
							if x, ok := sel.X.(*ast.Ident); ok && x.Name == "fmt" {
								t.Errorf("%s: fmt.%s runs before main", path, sel.Sel.Name)
							}
						}
					}
					return true
				})
			}
		}
	}
	if checked < 7 {
		t.Fatalf("checked %d files of the client's own packages: go list gave %q", checked, out)
	}
}
