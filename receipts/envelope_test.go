package receipts

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/prod-write/prod-write/pkg/dsse"
)

// FuzzParseEnvelope: the fast path and encoding/json agree on every input
// the fast path accepts.
func FuzzParseEnvelope(f *testing.F) {
	canonical, _ := json.Marshal(&dsse.Envelope{PayloadType: PayloadType, Payload: "eyJhIjoxfQ==", Signatures: []dsse.Signature{{KeyID: "ab12", Sig: "c2ln"}}})
	for _, s := range []string{
		string(canonical),
		`{"payloadType":"a\"b","payload":"x","signatures":[{"keyid":"k","sig":"s"}]}`,
		`{"payloadType":"a","payload":"x","signatures":[{"keyid":"k","sig":"s"},{"keyid":"k","sig":"s"}]}`,
		`{"payloadType":"a","payload":"x","signatures":[{"keyid":"k","sig":"s"}]} `,
		`{"payload":"x","payloadType":"a","signatures":[{"keyid":"k","sig":"s"}]}`,
		`{"payloadType":"a\u0041","payload":"x","signatures":[{"keyid":"k","sig":"s"}]}`,
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ok := fastEnvelope(line)
		if !ok {
			return
		}
		var slow dsse.Envelope
		if err := json.Unmarshal(line, &slow); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", line, err)
		}
		if !reflect.DeepEqual(*fast, slow) {
			t.Fatalf("fast path read %q as %+v, encoding/json as %+v", line, *fast, slow)
		}
	})
}

func TestFastEnvelopeReadsWhatTheJournalWrites(t *testing.T) {
	env := &dsse.Envelope{PayloadType: PayloadType, Payload: "eyJhIjoxfQ==", Signatures: []dsse.Signature{{KeyID: "ab12", Sig: "c2ln"}}}
	line, _ := json.Marshal(env)
	got, ok := fastEnvelope(line)
	if !ok || !reflect.DeepEqual(got, env) {
		t.Fatalf("fastEnvelope(%s) = %+v, %v", line, got, ok)
	}
}
