package mcpserver_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// TestAgentsDocListsEveryTool: the tools table of docs/AGENTS.md has one
// row for each tool the server registers, and none for a tool it does
// not, so neither can drift from the other. The plan tools, one per
// operation, are the one row plan_NAME.
func TestAgentsDocListsEveryTool(t *testing.T) {
	data, err := os.ReadFile("../../docs/AGENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Tools\n")
	if !ok {
		t.Fatal(`docs/AGENTS.md has no section "## Tools"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	first := regexp.MustCompile("^\\| `([^`]+)`")
	var documented []string
	for _, line := range strings.Split(section, "\n") {
		if m := first.FindStringSubmatch(line); m != nil {
			documented = append(documented, m[1])
		}
	}
	if len(documented) == 0 {
		t.Fatal("docs/AGENTS.md, Tools: no table rows found")
	}

	// Every tool there is: a principal with the agent role, the only role
	// a tool asks for, in a scope that allows run.
	pr := &approval.Principal{ID: "agent", Roles: []string{approval.RoleAgent}}
	var served []string
	for name := range mcpserver.ResolveScope(fakeRegistry(t), pr, mcpserver.Scope{AllowRun: true}) {
		if strings.HasPrefix(name, "plan_") {
			name = "plan_NAME"
		}
		if !slices.Contains(served, name) {
			served = append(served, name)
		}
	}
	if !slices.Contains(served, "plan_NAME") {
		t.Fatal("the registry gave no plan tool: the test would prove nothing about them")
	}
	for _, name := range served {
		if !slices.Contains(documented, name) {
			t.Errorf("docs/AGENTS.md, Tools: no row for %s, which the server serves", name)
		}
	}
	for _, name := range documented {
		if !slices.Contains(served, name) {
			t.Errorf("docs/AGENTS.md, Tools: a row for %s, which the server does not serve", name)
		}
	}
	slices.Sort(documented)
	for i := 1; i < len(documented); i++ {
		if documented[i] == documented[i-1] {
			t.Errorf("docs/AGENTS.md, Tools: two rows for %s", documented[i])
		}
	}
}
