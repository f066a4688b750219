package receipts

import (
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// TestReceiptTypesExact: replay decodes these with json.Unmarshal after
// strictjson.Check (strictjson.DecodeChecked), which is only as strict as a
// Decoder refusing unknown fields when their types are exact. A field
// embedded in one of them later silently takes the slower path; this test
// says so.
func TestReceiptTypesExact(t *testing.T) {
	for _, v := range []any{(*Receipt)(nil), (*approval.Envelope)(nil), (*operations.Plan)(nil)} {
		if !strictjson.Exact(v) {
			t.Errorf("%T is not exact for strictjson", v)
		}
	}
}
