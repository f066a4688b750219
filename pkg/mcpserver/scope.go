package mcpserver

import (
	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// OutOfScope is the refusal code of a call to a tool that the principal's
// roles would allow but the caller's scope (a read-only token, a server
// started read-only) does not reach.
const OutOfScope refusal.Code = "out_of_scope"

// Scope is what a caller may reach beyond what its principal's roles allow.
// The zero Scope is an agent scope without run: it may plan, never run.
type Scope struct {
	// ReadOnly omits every tool that writes: each plan tool (planning
	// stores a signed plan) and run. What is left reads: list_operations,
	// status, show_receipt.
	ReadOnly bool
	// AllowRun offers run, which still passes the one gate. It has no
	// effect on a read-only scope.
	AllowRun bool
}

// Within narrows s to what ceiling allows: read-only if either is, run only
// if both allow it. A service started without --allow-run thus offers run
// to no token, whatever the tokens file says.
func (s Scope) Within(ceiling Scope) Scope {
	return Scope{ReadOnly: s.ReadOnly || ceiling.ReadOnly, AllowRun: s.AllowRun && ceiling.AllowRun}
}

// ResolveScope returns the names of the tools a server acting for pr, under
// scope s, exposes for the registry reg. It is the one decision of which
// tools exist: the stdio server ([New]) and the HTTP handler
// ([NewHTTPHandler]) both build their servers from it, so a transport
// cannot widen a scope. Filing, deciding and Gera decisions are in no
// result: they are never tools.
func ResolveScope(reg *operations.Registry, pr *approval.Principal, s Scope) map[string]bool {
	out := map[string]bool{}
	// The handlers are never called here: only the tools' names, roles and
	// kinds are read.
	for _, t := range catalogue(reg, &handlers{}) {
		if s.exposes(pr, t) {
			out[t.def.Name] = true
		}
	}
	return out
}

// exposes reports whether a server acting for pr under s offers t.
func (s Scope) exposes(pr *approval.Principal, t *tool) bool {
	if t.writes && s.ReadOnly {
		return false
	}
	if t.runs && !s.AllowRun {
		return false
	}
	return holds(pr, t.role)
}

// holds reports whether pr may use a tool that needs role ("" for anyone).
func holds(pr *approval.Principal, role string) bool {
	return role == "" || (pr != nil && pr.Has(role))
}
