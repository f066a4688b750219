package receipts_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/keys/keystest"
	"github.com/prod-write/prod-write/receipts"
)

// TestReplayOneRuleWhateverTheBatch: a receipt whose signature ZIP-215
// accepts and crypto/ed25519 rejects (its runner's key has a small-order
// component, as in speccheck's case 5) verifies in a replay of it alone and
// in a replay of many receipts, whether its worker's batch verifies or
// fails for a forged neighbour and falls back to checking one by one
// (docs/adr/0013-signature-rule.md). Before one rule held for every path,
// it verified except in a batch with a bad signature.
func TestReplayOneRuleWhateverTheBatch(t *testing.T) {
	seed := sha256.Sum256([]byte("prod-write replay rule test: run1"))
	plain := keys.FromSeed(seed[:])
	odd := keystest.NewCofactored([]byte("prod-write replay rule test: run2"))
	policy := func() *approval.Policy {
		p, err := approval.ParsePolicy("trust.toml", fmt.Appendf(nil,
			"[[principal]]\nid = \"run1\"\nroles = [\"runner\"]\nkey = %q\n\n[[principal]]\nid = \"run2\"\nroles = [\"runner\"]\nkey = %q\n",
			plain.Public().String(), odd.Public().String()))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// journal signs n repair receipts, chained; the one at oddAt with the
	// mixed-order key, the one at forgedAt with a signature made bad
	// before the next entry links to it (-1: none).
	journal := func(n, oddAt, forgedAt int) []string {
		var lines []string
		prev := ""
		for i := range n {
			var signer dsse.Signer = plain
			r := &receipts.Receipt{Kind: receipts.KindRepair, Seq: uint64(i + 1), Prev: prev, Runner: "run1",
				Time: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), RunID: fmt.Sprint("run-", i), Repair: &receipts.Repair{Dropped: int64(i)}}
			if i == oddAt {
				signer, r.Runner = odd, "run2"
			}
			body, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			env, err := dsse.Sign(context.Background(), signer, receipts.PayloadType, body)
			if err != nil {
				t.Fatal(err)
			}
			if i == forgedAt {
				sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
				sig[5] ^= 0x10
				env.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
			}
			line, err := json.Marshal(env)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, string(line))
			prev = receipts.LineHash(line)
		}
		return lines
	}
	for _, tc := range []struct {
		name             string
		n, odd, forged   int
		workers          int
		wantBadSignature []int // 1-based lines
	}{
		{"alone", 1, 0, -1, 1, nil},
		{"among valid receipts", 16, 9, -1, 1, nil},
		{"beside a forged receipt in its batch", 16, 9, 8, 1, []int{9}},
		{"beside a forged receipt, on two workers", 16, 9, 8, 2, []int{9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res []receipts.Result
			rp := &receipts.Replayer{Policy: policy(), Workers: tc.workers}
			lines := journal(tc.n, tc.odd, tc.forged)
			sum, err := rp.Replay(strings.NewReader(strings.Join(lines, "\n")+"\n"), func(r receipts.Result) { res = append(res, r) })
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != tc.n {
				t.Fatalf("%d results for %d receipts", len(res), tc.n)
			}
			if r := res[tc.odd]; !r.OK || r.Runner != "run2" {
				t.Errorf("the receipt signed under ZIP-215's rule only: %+v; want it to verify", r)
			}
			var bad []int
			for _, r := range res {
				for _, p := range r.Problems {
					if p.Code != receipts.BadSignature {
						t.Errorf("line %d: unexpected %s: %s", r.Line, p.Code, p.Detail)
					}
					bad = append(bad, r.Line)
				}
			}
			if fmt.Sprint(bad) != fmt.Sprint(tc.wantBadSignature) || sum.OK != (len(bad) == 0) {
				t.Errorf("bad signatures on lines %v (summary %+v), want %v", bad, sum, tc.wantBadSignature)
			}
		})
	}
}
