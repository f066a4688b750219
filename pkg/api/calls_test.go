package api_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/api"
)

// docs/API.md's table of calls is the table: the same calls, in the same
// order, each with its op and the access the table gives it.
func TestDocumentedCallsAreTheTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## The calls\n")
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("^\\| `(\\w+)` \\| .* \\| `([a-z-]+)` \\| (.*) \\|$")
	var got []api.CallInfo
	var access []string
	for _, line := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		got = append(got, api.CallInfo{Method: m[1], Op: m[2]})
		access = append(access, m[3])
	}
	if len(got) != len(api.Calls) {
		t.Fatalf("docs/API.md lists %d calls, the table %d", len(got), len(api.Calls))
	}
	for i, c := range api.Calls {
		if got[i].Method != c.Method || got[i].Op != c.Op {
			t.Errorf("row %d: %s (%s), the table's: %s (%s)", i, got[i].Method, got[i].Op, c.Method, c.Op)
			continue
		}
		want := "`" + string(c.Access) + "`"
		if c.Keyless == api.KeylessRedacted {
			want += ", `redacted`"
		}
		if !strings.HasPrefix(access[i], want) || c.Keyless != api.KeylessRedacted && strings.HasPrefix(access[i], want+", `redacted`") {
			t.Errorf("%s: docs/API.md says %q, want it to begin %q", c.Method, access[i], want)
		}
	}
}

// Every call is declared once, and what a caller with no key gets follows
// from its access.
func TestCallsAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range api.Calls {
		if seen[c.Op] || seen[c.Method] {
			t.Errorf("%s (%s) declared twice", c.Method, c.Op)
		}
		seen[c.Op], seen[c.Method] = true, true
		switch {
		case c.Access == api.Anyone && c.Keyless == api.KeylessRefused,
			c.Access != api.Anyone && c.Keyless != api.KeylessRefused:
			t.Errorf("%s: access %s with keyless %s", c.Op, c.Access, c.Keyless)
		}
		if got, ok := api.CallOf(c.Op); !ok || got != c {
			t.Errorf("CallOf(%q) = %+v, %v", c.Op, got, ok)
		}
	}
}

// The table declares every method of the API, and nothing else.
func TestTheTableIsTheAPI(t *testing.T) {
	methods := map[string]bool{}
	ty := reflect.TypeFor[api.API]()
	for i := range ty.NumMethod() {
		methods[ty.Method(i).Name] = true
	}
	for _, c := range api.Calls {
		if !methods[c.Method] {
			t.Errorf("the table's %s is no method of the API", c.Method)
		}
		delete(methods, c.Method)
	}
	for m := range methods {
		t.Errorf("the API's %s is not in the table of calls", m)
	}
}
