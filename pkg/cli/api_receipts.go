package cli

import (
	"context"
	"fmt"

	"github.com/prod-write/prod-write/pkg/api"
)

// The receipts calls on the application API (docs/API.md): in-process,
// through the runner service, and the service's answer to each.

func (a serviceAPI) ReceiptsShow(ctx context.Context, req api.ReceiptsShowRequest) (*api.ReceiptsShowResult, error) {
	var r api.ReceiptsShowResult
	if err := a.call(ctx, "receipts-show", req, &r); err != nil {
		return nil, err
	}
	for _, e := range r.Entries {
		if e == nil || e.Receipt == nil {
			return nil, fmt.Errorf("the runner service's receipts show answered an entry with no receipt")
		}
	}
	return &r, nil
}

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
