package receipts_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// TestReplayJudgesEmbeddedEvidence: replay re-judges the records an intent
// carries, by the trust policy, even when the runner signed the receipt
// and the chain is intact: the runner key vouches for what the runner saw,
// not for whether it counted. (Run B of newWorld, lines 3 and 4, ran on one
// Gera go.)
func TestReplayJudgesEmbeddedEvidence(t *testing.T) {
	w, policy := chWorld(t)
	alice, err := keys.Load(filepath.Join(w.dir, "keys", "alice.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, ev []*approval.Envelope)
		want string
		why  string // in the problem's detail
	}{
		{"the go's signature broken", func(t *testing.T, ev []*approval.Envelope) {
			sig := []byte(ev[0].Signatures[0].Sig)
			sig[10] ^= 1
			ev[0].Signatures[0].Sig = string(sig)
		}, receipts.BadSignature, ""},
		{"the go re-signed by someone without the gera role", func(t *testing.T, ev []*approval.Envelope) {
			var g approval.GeraDecision
			payload, _ := base64.StdEncoding.DecodeString(ev[0].Payload)
			if err := json.Unmarshal(payload, &g); err != nil {
				t.Fatal(err)
			}
			g.Decider = "alice" // an approver, not a gera
			env, err := approval.Sign(alice, ev[0].PayloadType, g)
			if err != nil {
				t.Fatal(err)
			}
			ev[0] = env
		}, receipts.GateNotSatisfied, "role_missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := w.edit(w.journal, 2, w.runner, true, func(r *receipts.Receipt) {
				if len(r.Intent.Evidence) != 1 {
					t.Fatalf("run B's intent carries %d records, want its one gera go", len(r.Intent.Evidence))
				}
				tc.edit(t, r.Intent.Evidence)
			})
			res, sum := chReplay(t, policy, nil, lines)
			chWant(t, res, sum, map[string][]string{"3": {tc.want}})
			if d := res[2].Problems[0].Detail; !strings.Contains(d, tc.why) {
				t.Errorf("problem %q does not say %q", d, tc.why)
			}
		})
	}
}

// TestReplayDecodesStrictly: what replay accepts is what an independent,
// strict verifier would (docs/DESIGN.md §7): a field no receipt has, in the receipt
// or in the operation definition it carries, makes the entry malformed,
// though the runner signed it.
func TestReplayDecodesStrictly(t *testing.T) {
	w, policy := chWorld(t)
	for _, tc := range []struct {
		name string
		edit func(payload map[string]any)
	}{
		{"in the receipt", func(p map[string]any) { p["smuggled"] = true }},
		{"in the intent", func(p map[string]any) { p["intent"].(map[string]any)["smuggled"] = true }},
		{"in the operation definition", func(p map[string]any) {
			p["intent"].(map[string]any)["operation_definition"].(map[string]any)["smuggled"] = true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var env approval.Envelope
			if err := json.Unmarshal([]byte(w.journal[8]), &env); err != nil {
				t.Fatal(err)
			}
			payload, _ := base64.StdEncoding.DecodeString(env.Payload)
			var p map[string]any
			if err := json.Unmarshal(payload, &p); err != nil {
				t.Fatal(err)
			}
			tc.edit(p)
			lines := append([]string(nil), w.journal...)
			lines[8] = w.signRaw(p)
			res, _ := chReplay(t, policy, nil, lines)
			if got := chProblems(res)["9"]; !slices.Contains(got, receipts.Malformed) {
				t.Fatalf("line 9 with an unknown field %s: problems %v, want %s", tc.name, got, receipts.Malformed)
			}
		})
	}

	// A payload in base64 that is not the canonical encoding of its bytes
	// (non-zero padding bits) is another line with the same receipt; the
	// signature, over the bytes, would not tell them apart.
	t.Run("non-canonical base64", func(t *testing.T) {
		var env approval.Envelope
		if err := json.Unmarshal([]byte(w.journal[1]), &env); err != nil {
			t.Fatal(err)
		}
		payload, _ := base64.StdEncoding.DecodeString(env.Payload)
		for len(payload)%3 == 0 {
			// JSON allows space inside an object (not after it).
			payload = append([]byte{'{', ' '}, payload[1:]...)
		}
		canonical := base64.StdEncoding.EncodeToString(payload)
		pad := strings.IndexByte(canonical, '=')
		last := strings.IndexByte(chAlphabet, canonical[pad-1])
		// The lowest bit of the last character before the padding is
		// never part of the bytes, and canonically zero.
		odd := canonical[:pad-1] + string(chAlphabet[last|1]) + canonical[pad:]
		if b, err := base64.StdEncoding.DecodeString(odd); err != nil || string(b) != string(payload) {
			t.Fatalf("the test's own encoding: %v", err)
		}
		env.Payload = odd
		line, _ := json.Marshal(&env)
		if _, _, err := receipts.Decode(line); err == nil {
			t.Fatal("Decode accepted a payload in non-canonical base64")
		}
	})
}

const chAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// signRaw signs payload, as JSON, as a receipt with the runner key.
func (w *world) signRaw(payload any) string {
	w.t.Helper()
	env, err := approval.Sign(w.runner, receipts.PayloadType, payload)
	if err != nil {
		w.t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	return string(b)
}

// TestReplayReceiptClaims: what a runner-signed receipt says about itself
// is checked against what signed it and what it carries.
func TestReplayReceiptClaims(t *testing.T) {
	w, policy := chWorld(t)
	_, runA, err := receipts.Decode([]byte(w.journal[0]))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		line int // 1-based
		edit func(r *receipts.Receipt)
		want string
	}{
		// In a fleet every host has its own runner key: a receipt must be
		// the one its signer wrote, not another host's.
		{"it names another runner than its signer", 2, func(r *receipts.Receipt) { r.Runner = "alice" }, receipts.BadSignature},
		// Run B's intent claims run A's fingerprint: its plan says otherwise.
		{"it names another fingerprint than its plan", 3, func(r *receipts.Receipt) { r.Intent.Fingerprint = runA.Intent.Fingerprint }, receipts.FingerprintMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := w.edit(w.journal, tc.line-1, w.runner, true, tc.edit)
			res, sum := chReplay(t, policy, nil, lines)
			chWant(t, res, sum, map[string][]string{fmt.Sprint(tc.line): {tc.want}})
		})
	}
}
