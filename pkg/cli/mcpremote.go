package cli

import (
	"context"
	"io"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
)

// The MCP server of a runner service's client (`prod-write mcp` with a
// configuration that names a socket): each tool is the same call the CLI
// makes, so the service's gate, policy and scope decide, and the client
// holds nothing but the agent's key and files.

// remoteError is an error the service reported for a call (its --json
// error line), with its stable code.
type remoteError struct {
	Code string
	Msg  string
	Exit int
}

func (e *remoteError) Error() string { return e.Msg }

func (b *mcpBackend) remoteRegistry() (*operations.Registry, error) {
	r, err := serviceAPI{f: b.with(io.Discard, io.Discard)}.Ops(context.Background())
	if err != nil {
		return nil, err
	}
	return registryOf(r.Operations)
}

func (b *mcpBackend) remotePrincipal() (*approval.Principal, error) {
	r, err := serviceAPI{f: b.with(io.Discard, io.Discard)}.Whoami(context.Background())
	if err != nil {
		return nil, err
	}
	return r.Principal, nil
}
