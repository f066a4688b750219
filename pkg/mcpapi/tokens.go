package mcpapi

import "strings"

// TokenEntry is one [[token]] entry of the MCP tokens file as `prod-write
// mcp token list` shows it: never the token, nor its whole hash.
type TokenEntry struct {
	// ID is the first hex digits of the entry's sha256: what revoke takes.
	ID        string `json:"id"`
	Principal string `json:"principal"`
	// Scope is "read-only" or "agent".
	Scope    string `json:"scope"`
	AllowRun bool   `json:"allow_run"`
	// Source is where the entry is: FILE:LINE.
	Source string `json:"source"`
}

// TokensFile reads and edits the MCP tokens file (`prod-write mcp token`,
// docs/adr/0061-mcp-tokens-on-the-cli.md). Its one implementation is the
// format's owner, pkg/mcpserver, which only prod-write-net links: every
// file it writes is one the runner service's own parser accepts.
type TokensFile interface {
	// List returns the entries of the file at path, in file order.
	List(path string) ([]TokenEntry, error)
	// Add makes a new random bearer token for principal in scope, appends
	// the entry of its hash to the file at path (made when there is
	// none), and returns the token, which nothing keeps, and its entry.
	Add(path, principal, scope string, allowRun bool) (token string, added TokenEntry, err error)
	// Revoke removes the one entry whose ID begins with id.
	Revoke(path, id string) (TokenEntry, error)
}

// TokenIDError is a revoke whose id is no entry's, or more than one's.
type TokenIDError struct {
	ID string
	// Sources are the entries it matches (FILE:LINE): none, or several.
	Sources []string
}

func (e *TokenIDError) Error() string {
	if len(e.Sources) == 0 {
		return "no token entry has id " + e.ID + " (`prod-write mcp token list` shows the ids)"
	}
	return "id " + e.ID + " is the beginning of more than one entry's (" + strings.Join(e.Sources, ", ") + "): give more of it"
}
