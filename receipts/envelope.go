package receipts

import (
	"strings"

	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/strictjson"

	"github.com/prod-write/prod-write/approval"
)

// parseEnvelope reads one journal line as a DSSE envelope. Lines the
// journal writes have one exact shape (json.Marshal of a one-signature
// envelope, whose fields are base64 and hex), which fastEnvelope reads
// without a general JSON scan; anything else takes the strict decoder
// (pkg/strictjson: exact-case keys, no duplicates, nothing after the
// value). The fast path is strict by construction: it accepts only that
// exact byte sequence. Replay
// spends a tenth of its time here otherwise. FuzzParseEnvelope checks that
// both always agree.
func parseEnvelope(line []byte) (*approval.Envelope, error) {
	if env, ok := fastEnvelope(line); ok {
		return env, nil
	}
	var env approval.Envelope
	if err := strictjson.Unmarshal(line, &env); err != nil {
		return nil, err
	}
	return &env, nil
}

// fastEnvelope parses exactly
//
//	{"payloadType":"T","payload":"P","signatures":[{"keyid":"K","sig":"S"}]}
//
// where every field is printable ASCII without quotes or backslashes (so
// JSON unescaping would change nothing), and reports whether it did.
func fastEnvelope(line []byte) (*approval.Envelope, bool) {
	s := string(line)
	var f [4]string
	rest, ok := strings.CutPrefix(s, `{"payloadType":"`)
	for i, sep := range []string{`","payload":"`, `","signatures":[{"keyid":"`, `","sig":"`, `"}]}`} {
		if !ok {
			return nil, false
		}
		f[i], rest, ok = strings.Cut(rest, sep)
		if !ok || !plainJSON(f[i]) {
			return nil, false
		}
	}
	if !ok || rest != "" {
		return nil, false
	}
	return &approval.Envelope{PayloadType: f[0], Payload: f[1], Signatures: []dsse.Signature{{KeyID: f[2], Sig: f[3]}}}, true
}

// plainJSON reports whether s would appear in a JSON string unescaped.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
