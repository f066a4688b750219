package cli

import (
	"context"
	"io"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// The MCP server of a runner service's client (`prod-write mcp` with a
// configuration that names a socket): each tool is the same call the CLI
// makes, so the service's gate, policy and scope decide, and the client
// holds nothing but the agent's key and files.

func (b *mcpBackend) remoteRegistry() (*operations.Registry, error) {
	r, err := localapi.Client{Env: &b.with(io.Discard, io.Discard).Env}.Ops(context.Background())
	if err != nil {
		return nil, err
	}
	return localapi.RegistryOf(r.Operations)
}

func (b *mcpBackend) remotePrincipal() (*approval.Principal, error) {
	r, err := localapi.Client{Env: &b.with(io.Discard, io.Discard).Env}.Whoami(context.Background())
	if err != nil {
		return nil, err
	}
	return r.Principal, nil
}
