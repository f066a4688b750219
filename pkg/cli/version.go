package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/version"
)

// binary is the name of the binary this process is: prod-write-net is the
// one that links the network backends, and prod-write hands it the
// commands that need them (handoff.go). Told by what is linked, not by
// os.Args[0]: a renamed or symlinked binary is still one of the two.
func (f *Factory) binary() string {
	if f.AWS != nil || f.Net != nil {
		return NetBinary
	}
	return "prod-write"
}

// versionDoc is what `version` and `--version` print with --json.
type versionDoc struct {
	FormatVersion int    `json:"format_version"`
	Binary        string `json:"binary"`
	Version       string `json:"version"`
}

// writeVersion prints which binary answered and its build, as text or as
// one JSON document: `version` and `--version` print exactly this.
func writeVersion(w io.Writer, binary string, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(versionDoc{localapi.FormatVersion, binary, version.Version})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(w, "%s version %s\n", binary, version.Version)
	return err
}

// NewCmdVersion builds `version`.
func NewCmdVersion(f *Factory, runF func() error) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Say which binary this is (prod-write or prod-write-net) and which build",
		Long: `version prints the binary's name, prod-write or prod-write-net (which links
the DynamoDB and S3 backends, the bridges and MCP, and runs the commands
prod-write hands it), and its build: the module version, or the VCS revision
it was built from. --version prints the same.`,
		Example: "  prod-write version\n  prod-write-net version --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF()
			}
			return writeVersion(f.IO.Out, f.binary(), f.JSON)
		},
	}
}

// versionTemplate is cobra's template for --version: what writeVersion
// prints, as text or, with --json, as JSON (docs/JSON.md).
func versionTemplate(binary string) string {
	var text, doc strings.Builder
	writeVersion(&text, binary, false)
	writeVersion(&doc, binary, true)
	return `{{if (and (.Flags.Lookup "json") (eq (.Flags.Lookup "json").Value.String "true"))}}{{print ` +
		strconv.Quote(doc.String()) + `}}{{else}}{{print ` + strconv.Quote(text.String()) + `}}{{end}}`
}
