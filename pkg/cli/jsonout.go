package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// printDoc writes fields, with format_version added, as one indented JSON
// document.
func printDoc(w io.Writer, fields map[string]any) error {
	fields["format_version"] = localapi.FormatVersion
	return printJSON(w, fields)
}

// printRan writes run's outcome line (its last line on stderr with --json,
// after the program's own output), encoded as JSON rather than with Go
// quoting, which differs for some bytes.
func printRan(w io.Writer, r *api.RunResult) {
	b, _ := json.Marshal(struct {
		FormatVersion int    `json:"format_version"`
		Outcome       string `json:"outcome"`
		Operation     string `json:"operation"`
		Fingerprint   string `json:"fingerprint"`
		ExitCode      int    `json:"exit_code"`
		Intent        uint64 `json:"intent"`
		Receipt       uint64 `json:"receipt"`
	}{r.FormatVersion, r.Outcome, r.Operation, r.Fingerprint, r.ExitCode, r.Intent, r.Receipt})
	fmt.Fprintf(w, "%s\n", b)
}
