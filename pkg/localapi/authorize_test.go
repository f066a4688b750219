package localapi

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/service"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// Every call of the table, made by every kind of caller, is authorized
// as docs/API.md's access column says, read from the document (not from
// the table): a stranger is refused a keyed call principal_unknown and an
// operator's call role_missing, and gets a redacted call redacted; a
// principal of the policy (a key handed over, a token's) is refused only
// the operator's calls; the operator and this process are refused
// nothing. And the service has a handler for each call, and for nothing
// else, so no call is served without passing here.
func TestEveryCallByEveryCaller(t *testing.T) {
	doc, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `\\w+` \\| .* \\| `([a-z-]+)` \\| `(anyone|keyed|operator)`(, `redacted`)?")
	documented := map[string][2]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			documented[m[1]] = [2]string{m[2], m[3]}
		}
	}
	callers := []struct {
		name string
		who  Caller
	}{
		{"this process", Caller{Kind: InProcess, Keyed: true, Operator: true}},
		{"a token's principal", Caller{Kind: TokenPrincipal, Keyed: true}},
		{"a socket peer with a key of the policy", Caller{Kind: SocketPeer, Keyed: true}},
		{"the service's operator, keyless", Caller{Kind: SocketPeer, Operator: true}},
		{"a stranger", Caller{Kind: SocketPeer}},
	}
	for _, c := range api.Calls {
		doc, ok := documented[c.Op]
		if !ok {
			t.Errorf("%s: no access in docs/API.md", c.Op)
			continue
		}
		for _, cl := range callers {
			redact, err := Authorize(c, cl.who)
			stranger := !cl.who.Keyed && !cl.who.Operator
			var want refusal.Code
			switch {
			case doc[0] == "operator" && !cl.who.Operator:
				want = refusal.RoleMissing
			case doc[0] == "keyed" && stranger:
				want = refusal.PrincipalUnknown
			}
			r, _ := refusal.As(err)
			switch {
			case want != "" && (r == nil || r.Code != want):
				t.Errorf("%s by %s: %v, want refused %s", c.Op, cl.name, err, want)
			case want == "" && err != nil:
				t.Errorf("%s by %s: refused: %v", c.Op, cl.name, err)
			case want == "" && redact != (stranger && doc[1] != ""):
				t.Errorf("%s by %s: redacted %v, docs/API.md says %q", c.Op, cl.name, redact, doc[0]+doc[1])
			}
		}
		if handlers[c.Op] == nil {
			t.Errorf("%s: the service has no handler", c.Op)
		}
	}
	for op := range handlers {
		if _, ok := api.CallOf(op); !ok {
			t.Errorf("the service serves %s, which the table does not declare", op)
		}
	}
}

// The MCP backends' tools reach the application through the same
// authorization as the socket: a stranger's tool call of a keyed call
// (wait_for_decision) is refused before anything runs, its status and
// receipts are redacted; a token's principal is refused neither.
func TestHostedCallsAreAuthorized(t *testing.T) {
	stranger := &Env{Call: &servicecall.Call{Socket: &service.Call{Peer: service.Peer{UID: 4242}}, State: &servicecall.State{UID: 4343}}}
	hosted := &Env{Call: &servicecall.Call{Hosted: true}}
	for _, tc := range []struct {
		name   string
		f      *Env
		call   api.CallInfo
		refuse refusal.Code
		redact bool
	}{
		{"stranger wait", stranger, api.CallWait.CallInfo, refusal.PrincipalUnknown, false},
		{"stranger status", stranger, api.CallStatus.CallInfo, "", true},
		{"stranger receipt", stranger, api.CallReceiptsShow.CallInfo, "", true},
		{"stranger plan", stranger, api.CallPlan.CallInfo, "", false},
		{"hosted wait", hosted, api.CallWait.CallInfo, "", false},
		{"hosted status", hosted, api.CallStatus.CallInfo, "", false},
		{"hosted run", hosted, api.CallRun.CallInfo, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &MCPBackend{f: tc.f}
			a, err := b.reach(tc.call, 0)
			if tc.refuse != "" {
				if r, ok := refusal.As(err); !ok || r.Code != tc.refuse {
					t.Fatalf("reach: %v, want refused %s", err, tc.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.(API).Redact; got != tc.redact {
				t.Errorf("redact %v, want %v", got, tc.redact)
			}
		})
	}
}
