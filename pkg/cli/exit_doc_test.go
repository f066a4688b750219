package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// Every exit code exit.go defines is a row of ExitStatuses, which the man
// page's EXIT STATUS is generated from: read from exit.go's source, so a
// constant added without its row fails here.
func TestDocExitStatusesCoverEveryExitCode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "exit.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	used := map[string]bool{}
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
				if g.Tok == token.CONST && strings.HasPrefix(n.Name, "Exit") {
					consts = append(consts, n.Name)
				}
				if g.Tok != token.VAR || n.Name != "ExitStatuses" || i >= len(v.Values) {
					continue
				}
				// The Code field of each row names its constant.
				for _, row := range v.Values[i].(*ast.CompositeLit).Elts {
					for _, kv := range row.(*ast.CompositeLit).Elts {
						kv := kv.(*ast.KeyValueExpr)
						if kv.Key.(*ast.Ident).Name == "Code" {
							id, ok := kv.Value.(*ast.Ident)
							if !ok {
								t.Errorf("an ExitStatuses row's Code is %T, not a constant's name", kv.Value)
								continue
							}
							used[id.Name] = true
						}
					}
				}
			}
		}
	}
	if len(consts) < 10 {
		t.Fatalf("only %d exit constants found in exit.go: %v", len(consts), consts)
	}
	for _, c := range consts {
		if !used[c] {
			t.Errorf("exit code %s has no row in ExitStatuses (the man page's EXIT STATUS)", c)
		}
	}
	seen := map[int]bool{}
	for _, s := range ExitStatuses {
		if seen[s.Code] || s.Meaning == "" {
			t.Errorf("exit status %d: listed twice or without a meaning", s.Code)
		}
		seen[s.Code] = true
	}
}
