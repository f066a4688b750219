package admin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// The scopes of a token entry (docs/CONFIG.md, "MCP tokens file").
const (
	MCPScopeReadOnly = "read-only"
	MCPScopeAgent    = "agent"
)

// MCPTokenAddRequest is mcp token add's. Tokens is the tokens file; empty,
// the configured one ([service] mcp_tokens).
type MCPTokenAddRequest struct {
	Tokens    string
	Principal string
	Scope     string
	AllowRun  bool
}

// MCPTokenAddResult is the token mcp token add made and its entry, as its
// --json prints it. Token is shown this once: only its hash is kept.
type MCPTokenAddResult struct {
	FormatVersion int    `json:"format_version"`
	Token         string `json:"token"`
	File          string `json:"file"`
	mcpapi.TokenEntry
}

// MCPTokenListResult is the entries of the tokens file, as mcp token list
// --json prints them.
type MCPTokenListResult struct {
	FormatVersion int                 `json:"format_version"`
	File          string              `json:"file"`
	Tokens        []mcpapi.TokenEntry `json:"tokens"`
}

// MCPTokenRevokeResult is the entry mcp token revoke removed, as its
// --json prints it.
type MCPTokenRevokeResult struct {
	FormatVersion int    `json:"format_version"`
	File          string `json:"file"`
	mcpapi.TokenEntry
}

// MCPTokenAdd makes a bearer token for MCP over HTTP and appends the entry
// of its hash to the tokens file (docs/adr/0061-mcp-tokens-on-the-cli.md).
// The principal must be in the trust policy with the agent role: a token
// is an agent's way in, whatever its scope. The running service serves
// the token from its next request.
func MCPTokenAdd(env *localapi.Env, req MCPTokenAddRequest) (*MCPTokenAddResult, error) {
	switch req.Scope {
	case MCPScopeReadOnly:
		if req.AllowRun {
			return nil, &localapi.UsageError{Msg: "--allow-run needs --scope agent: a read-only token never runs"}
		}
	case MCPScopeAgent:
	case "":
		// No default: a forgotten scope must not widen to agent.
		return nil, &localapi.UsageError{Msg: fmt.Sprintf("--scope is required: %s or %s", MCPScopeReadOnly, MCPScopeAgent)}
	default:
		return nil, &localapi.UsageError{Msg: fmt.Sprintf("--scope %q: want %s or %s", req.Scope, MCPScopeReadOnly, MCPScopeAgent)}
	}
	files, c, path, err := mcpTokensFile(env, req.Tokens)
	if err != nil {
		return nil, err
	}
	policy, err := env.Policy(c)
	if err != nil {
		return nil, err
	}
	pr, ok := policy.ByID(req.Principal)
	if !ok {
		return nil, refusal.New(refusal.PrincipalUnknown, "principal %q is not in the trust policy %s", req.Principal, c.Trust).
			Needs(fmt.Sprintf("a [[principal]] with id %q and the %s role in %s", req.Principal, approval.RoleAgent, c.Trust))
	}
	if !pr.Has(approval.RoleAgent) {
		return nil, refusal.New(refusal.RoleMissing, "principal %q does not hold the %s role: a token for MCP over HTTP is an agent's", req.Principal, approval.RoleAgent).
			Needs(fmt.Sprintf("role %s for %q in %s", approval.RoleAgent, req.Principal, c.Trust))
	}
	if req.Scope == MCPScopeAgent {
		// Planning signs with the principal's key, which the service
		// holds in mcp_keys: without it the token only reads.
		if dir := c.Service.MCPKeys; dir == "" {
			env.Warn("[service] mcp_keys is not set: %s's token can read but not plan", req.Principal)
		} else if _, err := os.Stat(filepath.Join(dir, req.Principal+".key")); errors.Is(err, os.ErrNotExist) {
			env.Warn("%s has no key in [service] mcp_keys (%s): its token can read but not plan until there is one", req.Principal, filepath.Join(dir, req.Principal+".key"))
		}
	}
	token, e, err := files.Add(path, req.Principal, req.Scope, req.AllowRun)
	if err != nil {
		return nil, err
	}
	return &MCPTokenAddResult{FormatVersion: localapi.FormatVersion, Token: token, File: path, TokenEntry: e}, nil
}

// MCPTokenList returns the entries of the tokens file: never a token, nor
// a whole hash.
func MCPTokenList(env *localapi.Env, tokens string) (*MCPTokenListResult, error) {
	files, _, path, err := mcpTokensFile(env, tokens)
	if err != nil {
		return nil, err
	}
	entries, err := files.List(path)
	if err != nil {
		return nil, err
	}
	return &MCPTokenListResult{FormatVersion: localapi.FormatVersion, File: path, Tokens: localapi.NonNil(entries)}, nil
}

// MCPTokenRevoke removes the entry whose id begins with id from the
// tokens file. The running service refuses the token from its next
// request, and ends its sessions.
func MCPTokenRevoke(env *localapi.Env, tokens, id string) (*MCPTokenRevokeResult, error) {
	files, _, path, err := mcpTokensFile(env, tokens)
	if err != nil {
		return nil, err
	}
	e, err := files.Revoke(path, id)
	var idErr *mcpapi.TokenIDError
	if errors.As(err, &idErr) {
		return nil, &localapi.DataError{Err: fmt.Errorf("%s: %w", path, err)}
	}
	if err != nil {
		return nil, err
	}
	return &MCPTokenRevokeResult{FormatVersion: localapi.FormatVersion, File: path, TokenEntry: e}, nil
}

// mcpTokensFile returns the tokens file's editor, the configuration and
// the file: tokens (relative to the working directory), or the
// configured one.
func mcpTokensFile(env *localapi.Env, tokens string) (mcpapi.TokensFile, *config.Config, string, error) {
	if env.Net == nil {
		return nil, nil, "", fmt.Errorf("the MCP tokens file is read by %s's parser, which this build lacks", localapi.NetBinary)
	}
	c, err := env.Config()
	if err != nil {
		return nil, nil, "", err
	}
	path := c.Service.MCPTokens
	if tokens != "" {
		path = tokens
		if !filepath.IsAbs(path) {
			cwd, err := env.Getwd()
			if err != nil {
				return nil, nil, "", err
			}
			path = filepath.Join(cwd, path)
		}
	}
	if path == "" {
		return nil, nil, "", &config.Error{Path: c.Path, Msg: "[service] mcp_tokens names no tokens file: set it, or give --tokens FILE"}
	}
	return env.Net.MCPTokens(), c, path, nil
}
