package cli

import (
	"io"

	"github.com/prod-write/prod-write/pkg/localapi"
)

// printDoc writes fields, with format_version added, as one indented JSON
// document.
func printDoc(w io.Writer, fields map[string]any) error {
	fields["format_version"] = localapi.FormatVersion
	return printJSON(w, fields)
}
