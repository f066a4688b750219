package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every exit code is a row of ExitStatuses, which the man page's EXIT
// STATUS is generated from. The codes are pkg/localapi's constants
// (errors.go), which exit.go only aliases: they are read from the source
// of every file of pkg/localapi, so a code added there without its row
// fails here, whether or not exit.go aliases it.
func TestDocExitStatusesCoverEveryExitCode(t *testing.T) {
	defined := localapiExitConstants(t)
	if len(defined) < 10 {
		t.Fatalf("only %d exit constants found in pkg/localapi: %v", len(defined), defined)
	}
	aliases, rows := exitGoRows(t)
	for name, target := range aliases {
		if target != name || !slices.Contains(defined, target) {
			t.Errorf("exit.go: %s = localapi.%s, want the localapi constant of its own name", name, target)
		}
	}
	documented := map[string]bool{}
	for _, row := range rows {
		c := row
		if target, ok := aliases[row]; ok {
			c = target
		}
		if !slices.Contains(defined, c) {
			t.Errorf("an ExitStatuses row's Code is %s, which is no exit code pkg/localapi defines", row)
		}
		documented[c] = true
	}
	for _, c := range defined {
		if !documented[c] {
			t.Errorf("exit code localapi.%s has no row in ExitStatuses (the man page's EXIT STATUS)", c)
		}
	}
	if len(ExitStatuses) != len(defined) {
		t.Errorf("%d rows in ExitStatuses for %d exit codes", len(ExitStatuses), len(defined))
	}
	seen := map[int]bool{}
	for _, s := range ExitStatuses {
		if seen[s.Code] || s.Meaning == "" {
			t.Errorf("exit status %d: listed twice or without a meaning", s.Code)
		}
		seen[s.Code] = true
	}
}

// localapiExitConstants returns the name of every constant whose name
// begins with Exit in pkg/localapi's source, its tests left out.
func localapiExitConstants(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "localapi", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no source of pkg/localapi: %v", err)
	}
	var out []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						if strings.HasPrefix(n.Name, "Exit") {
							out = append(out, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// exitGoRows reads exit.go: each Exit constant it declares with the
// localapi constant it aliases, and the constant each ExitStatuses row's
// Code names (an alias, or localapi's own as localapi.ExitX).
func exitGoRows(t *testing.T) (aliases map[string]string, rows []string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "exit.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	aliases = map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			v, ok := s.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, n := range v.Names {
				switch {
				case g.Tok == token.CONST && strings.HasPrefix(n.Name, "Exit"):
					var name string
					ok := i < len(v.Values)
					if ok {
						name, ok = localapiName(v.Values[i])
					}
					if !ok {
						t.Errorf("exit.go: %s is not an alias of a localapi constant", n.Name)
					}
					aliases[n.Name] = name
				case g.Tok == token.VAR && n.Name == "ExitStatuses" && i < len(v.Values):
					for _, row := range v.Values[i].(*ast.CompositeLit).Elts {
						for _, kv := range row.(*ast.CompositeLit).Elts {
							kv := kv.(*ast.KeyValueExpr)
							if kv.Key.(*ast.Ident).Name != "Code" {
								continue
							}
							name, ok := kv.Value.(*ast.Ident)
							if ok {
								rows = append(rows, name.Name)
							} else if name, ok := localapiName(kv.Value); ok {
								rows = append(rows, name)
							} else {
								t.Errorf("an ExitStatuses row's Code is %T, not a constant's name", kv.Value)
							}
						}
					}
				}
			}
		}
	}
	if len(rows) == 0 {
		t.Fatal("exit.go: no ExitStatuses rows found")
	}
	return aliases, rows
}

// localapiName returns X of the expression localapi.X.
func localapiName(e ast.Expr) (string, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "localapi" {
		return "", false
	}
	return sel.Sel.Name, true
}
