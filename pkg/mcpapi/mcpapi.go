// Package mcpapi is the contract between prod-write's MCP server
// (pkg/mcpserver) and the API that implements its tools (localapi.MCPBackend).
// It links no MCP SDK: prod-write itself implements the contract, and only
// prod-write-net, which serves it, links the SDK (docs/adr/0010-network-binary.md).
package mcpapi

import (
	"context"
	"encoding/json"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// Backend is what the tools call: the CLI's code paths. Package cli holds
// the one implementation (localapi.MCPBackend). Every method reads the
// configuration, registry, trust policy and store as they are at call time.
type Backend interface {
	// Registry loads the operation registry.
	Registry() (*operations.Registry, error)
	// Principal returns the principal of the server's key; nil, nil when
	// the server has no key.
	Principal() (*approval.Principal, error)
	// Plan is `prod-write plan`: the application API's plan call
	// (api.API.Plan), whose result `plan --json` prints.
	Plan(req PlanRequest) (*api.PlanResult, error)
	// Status is `prod-write status`: it returns the report as `status
	// --json` prints it and, when run would not pass the gate now, why.
	Status(fingerprint string) (report any, refused *refusal.Error, err error)
	// Wait is `prod-write status FP --wait --timeout T`: it returns the
	// report when the plan's decision request is no longer pending (the
	// gate opened, a veto landed, the plan was withdrawn, the request
	// expired), or when timeout passes, with pending true. progress is
	// called, from the waiting goroutine, while it waits. ctx ends the
	// wait early (a cancelled call).
	Wait(ctx context.Context, fingerprint string, timeout time.Duration, progress func(message string)) (report any, refused *refusal.Error, pending bool, err error)
	// Receipt is `prod-write receipts show`: the journal entries of one
	// run id or sequence number.
	Receipt(id string) ([]json.RawMessage, error)
	// Run is `prod-write run`, with the program's output captured. inline,
	// optional, is the content of each file the plan binds as supplied
	// inline, by name (MCP over HTTP only), sent again: the plan keeps it,
	// and run takes what is not sent from there
	// (docs/adr/0063-file-content-kept-with-the-plan.md).
	Run(fingerprint string, inline map[string][]byte) (*RunResult, error)
	// ErrorCode is the stable code of an error that is not a refusal, as
	// `--json` reports it ("usage", "config", "bad_input", "io",
	// "internal").
	ErrorCode(err error) string
}

// PlanRequest is one call of a plan tool. Over stdio a file is a path
// (Files); over HTTP, where the caller shares no file system with the
// service, it is its content (Inline), at most [MaxInlineFile] bytes
// each and [MaxInlineTotal] in all.
type PlanRequest struct {
	Operation string
	Target    string
	Params    map[string]string
	Files     map[string]string
	Inline    map[string][]byte
}

// The bounds of the content supplied inline in one call of MCP over HTTP
// (docs/adr/0039-inline-files-over-mcp-http.md): attacker input to a
// privileged process, held in its memory for the call alone.
const (
	MaxInlineFile  = 1 << 20
	MaxInlineTotal = 4 << 20
)

// RunResult is what run returns: the program ran, with this status.
type RunResult struct {
	Outcome     string `json:"outcome"` // "ran"
	Operation   string `json:"operation"`
	Fingerprint string `json:"fingerprint"`
	ExitCode    int    `json:"exit_code"`
	// Intent and Receipt are the journal sequence numbers of the run's
	// intent and outcome receipts (show_receipt takes either).
	Intent  uint64 `json:"intent"`
	Receipt uint64 `json:"receipt"`
	// Stdout and Stderr are the program's output, at most a bounded
	// prefix (the receipts hold the size and sha256 of all of it), with
	// the value of every secret variable redacted.
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
}

// Calls is the runner service's count of its calls in progress, whatever
// their transport (pkg/service's Server implements it), so that a stop
// treats MCP over HTTP as it treats the socket
// (docs/adr/0031-waits-through-the-service.md).
type Calls interface {
	// Join admits one call. ctx is done once the service stops: a call
	// that only waits ends then, one that runs a program ignores it. The
	// stop waits, without a time limit, until done is called. ok is false
	// once the service stops: the call is refused.
	Join() (ctx context.Context, done func(), ok bool)
	// OnStop has closeListener called once the service stops, before any
	// call learns of it: it closes a listener, and must not wait for the
	// calls.
	OnStop(closeListener func())
}
