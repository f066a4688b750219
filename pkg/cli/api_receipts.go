package cli

import (
	"fmt"

	"github.com/prod-write/prod-write/pkg/api"
)

// receiptsShowRender prints what receipts show found: each entry as a
// JSON document, and for an intent, in text, why it was allowed.
func receiptsShowRender(f *Factory, r *api.ReceiptsShowResult) error {
	for _, e := range r.Entries {
		if err := printJSON(f.IO.Out, e); err != nil {
			return err
		}
		if e.Explanation != nil && !f.JSON {
			fmt.Fprintf(f.IO.Out, "why: %s\n", e.Explanation.Sentence)
		}
	}
	return nil
}
