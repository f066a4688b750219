package strictjson_test

import (
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/strictjson"
	"github.com/prod-write/prod-write/receipts"
)

// TestReceiptTypesExact: replay decodes these with json.Unmarshal after
// strictjson.Check (strictjson.DecodeChecked), which is only as strict as a
// Decoder refusing unknown fields when their types are exact
// (docs/adr/0029-one-decode-after-the-strict-check.md). A field embedded in
// one of them later silently takes the slower path; this test says so.
func TestReceiptTypesExact(t *testing.T) {
	for _, v := range []any{(*receipts.Receipt)(nil), (*approval.Envelope)(nil), (*operations.Plan)(nil)} {
		if !strictjson.Exact(v) {
			t.Errorf("%T is not exact for strictjson", v)
		}
	}
}
