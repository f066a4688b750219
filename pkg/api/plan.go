package api

import (
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/bridge"
)

// PlanRequest is one invocation of an operation to plan. Files name each
// file parameter's path, relative to the caller's working directory; in
// service mode the client opens each one and hands it over, and the
// service reads the descriptor, never the path (docs/DESIGN.md §13). Over MCP HTTP a
// file is supplied inline instead, and its path is
// [operations.InlinePath] (docs/adr/0039-inline-files-over-mcp-http.md).
type PlanRequest struct {
	Operation string            `json:"operation"`
	Target    string            `json:"target"`
	Params    map[string]string `json:"params,omitempty"`
	Files     map[string]string `json:"files,omitempty"`
	// DryRun resolves and fingerprints without a key and stores nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// PlanResult is a plan as `plan --json` prints it (docs/JSON.md): the
// plan, whether it was stored, and the decision request of a stored plan
// that needs a human (docs/adr/0020-decision-requests.md). Its "version"
// is the plan encoding's own (docs/FORMAT.md); format_version is this
// document's. A plan stored before under the same fingerprint is returned
// as it was first signed.
type PlanResult struct {
	FormatVersion int `json:"format_version"`
	*operations.Plan
	Stored  bool                    `json:"stored"`
	Request *bridge.DecisionRequest `json:"request,omitempty"`
}
