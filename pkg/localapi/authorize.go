package localapi

import (
	"fmt"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// CallerKind is how a call reached the application.
type CallerKind int

const (
	// InProcess: this process, as the account that runs it (local mode,
	// or the runner service's own calls).
	InProcess CallerKind = iota
	// SocketPeer: a client of the runner service's socket, an account the
	// kernel names, with the key it handed over if any.
	SocketPeer
	// TokenPrincipal: MCP over HTTP, a bearer token's principal.
	TokenPrincipal
)

func (k CallerKind) String() string {
	return [...]string{"in-process", "socket peer", "token principal"}[k]
}

// Caller is who makes a call, as [Authorize] judges it.
type Caller struct {
	Kind CallerKind
	// Keyed: the caller is a principal of the trust policy (a key of the
	// policy handed over; a token's principal).
	Keyed bool
	// Operator: the caller runs the service (root or its own account).
	Operator bool
}

// Caller is who makes f's call: the kind is the transport's, set where
// the call came in, and what it holds is read from the call, never
// inferred from which fields are unset.
func (f *Env) Caller() Caller {
	switch {
	case f.Call == nil:
		return Caller{Kind: InProcess, Keyed: true, Operator: true}
	case f.Call.Hosted:
		return Caller{Kind: TokenPrincipal, Keyed: true}
	default:
		return Caller{Kind: SocketPeer, Keyed: f.Call.Keyed(), Operator: f.Call.IsOperator()}
	}
}

// Authorize decides whether who may make call c, before any handler runs,
// for every way a call comes in: the socket's dispatch (ServeAPI) and the
// MCP backends (stdio in this process, MCP over HTTP in the service) make
// it, from the table of calls (api.Calls). It returns the refusal, or
// whether c's result is to be redacted for who.
func Authorize(c api.CallInfo, who Caller) (redact bool, err error) {
	mayRead := who.Keyed || who.Operator
	switch c.Access {
	case api.Operator:
		if !who.Operator {
			return false, refusal.New(refusal.RoleMissing, "%s is the service's operator's alone (root or the service's own account), not a %s's", c.Op, who.Kind).Needs("run as root or the service's account")
		}
	case api.Keyed:
		if !mayRead {
			return false, refusal.New(refusal.PrincipalUnknown, "%s shows what plans bind, and the caller handed over no key of the trust policy", c.Op).Needs("--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml")
		}
	case api.Anyone:
	default:
		return false, fmt.Errorf("call %s: access %q is not one of the table's", c.Op, c.Access)
	}
	return !mayRead && c.Keyless == api.KeylessRedacted, nil
}

// authorize is Authorize for f's caller.
func (f *Env) authorize(c api.CallInfo) (redact bool, err error) {
	return Authorize(c, f.Caller())
}
