package localapi

import (
	"context"
	"io"

	"github.com/prod-write/prod-write/pkg/api"
)

// ReceiptsExport through the service: the envelopes come over the call's
// socket as its output, and are written to req.Out here.
func (a ServiceClient) ReceiptsExport(ctx context.Context, req api.ReceiptsExportRequest) (*api.ReceiptsExportResult, error) {
	g := *a.Env
	g.IO = &Streams{Out: req.Out, Err: a.Env.IO.Err, ErrTTY: a.Env.IO.ErrTTY}
	if g.IO.Out == nil {
		g.IO.Out = io.Discard
	}
	var r api.ReceiptsExportResult
	if err := callInto(ctx, ServiceClient{Env: &g}, api.CallExport, req, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
