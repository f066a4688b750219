package localapi

import (
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// Files supplied inline over MCP HTTP, each under the bound of one file,
// are refused when they are over the bound in all, before any of them is
// copied (pkg/cli.TestMCPHTTPInlineFilesAttackerInput covers the bound of one
// file, through the whole service).
func TestInlineFilesBoundedInAll(t *testing.T) {
	h := &hostedBackend{MCPBackend: &MCPBackend{f: &Env{}}, sc: &servicecall.Call{}}
	total := mcpapi.MaxInlineTotal/mcpapi.MaxInlineFile + 1
	names := make([]string, total)
	inline := map[string][]byte{}
	for i := range names {
		names[i] = string(rune('a' + i))
		inline[names[i]] = make([]byte, mcpapi.MaxInlineFile)
	}
	if _, _, err := h.forCall("many", names, inline); err == nil || !strings.Contains(err.Error(), "in all") {
		t.Errorf("%d files of %d bytes: %v", total, mcpapi.MaxInlineFile, err)
	}
	// One fewer is within the bound.
	delete(inline, names[0])
	b, done, err := h.forCall("many", names, inline)
	if err != nil {
		t.Fatalf("%d files of %d bytes: %v", total-1, mcpapi.MaxInlineFile, err)
	}
	defer done()
	if got := len(b.f.Call.Inline); got != total-1 {
		t.Errorf("%d sealed files, want %d", got, total-1)
	}
}
