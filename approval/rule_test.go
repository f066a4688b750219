package approval_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys/keystest"
)

// TestOneRuleOnEveryPath: a record whose signature ZIP-215 accepts and
// crypto/ed25519 rejects (a mixed-order key's, as in speccheck's case 5)
// gets one verdict, acceptance, from every path that checks a signature:
// Open without and with the cache, VerifyWith, and VerifyBatch in a batch
// of one, a batch of valid records, and a failed batch whose signatures
// are then checked one by one (docs/adr/0013-signature-rule.md). With any
// path on crypto/ed25519's rule instead, the record would open in one
// replay and not in another, or in replay and not in run.
func TestOneRuleOnEveryPath(t *testing.T) {
	odd := keystest.NewCofactored([]byte("prod-write approval test key: mallory"))
	policy := func(cache bool) *approval.Policy {
		src := policyTOML(demoCast) + fmt.Sprintf("\n[[principal]]\nid = \"mallory\"\nroles = [\"approver\"]\nkey = %q\n", odd.Public().String())
		p, err := approval.ParsePolicy("trust.toml", []byte(src))
		if err != nil {
			t.Fatalf("a policy with a mixed-order key: %v", err)
		}
		if cache {
			p.CacheVerifications()
		}
		return p
	}
	fp := "sha256:" + zeros64
	body, err := json.Marshal(answer(fp, zeros64, approval.Approve, "mallory"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := dsse.Sign(context.Background(), odd, approval.TypeTrinity, body)
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if ed25519.Verify(ed25519.PublicKey(odd.Public()), dsse.PAE(env.PayloadType, body), sig) {
		t.Fatal("crypto/ed25519 accepts the test signature: it does not tell the rules apart")
	}
	good := []*approval.Envelope{
		mustSign(t, "gera", approval.TypeGera, geraGo(fp, "gera", 1)),
		mustSign(t, "alice", approval.TypeTrinity, answer(fp, zeros64, approval.Approve, "alice")),
		mustSign(t, "smith", approval.TypeSmith, smithRecord(fp, "smith")),
	}
	forged := flipSignature(t, mustSign(t, "bob", approval.TypeTrinity, answer(fp, zeros64, approval.Approve, "bob")), 77)

	t.Run("Open", func(t *testing.T) {
		if s, err := policy(false).Open(env); err != nil || s.Signer.ID != "mallory" {
			t.Errorf("Open = %v, %v; want mallory's record", s, err)
		}
		p := policy(true)
		if _, err := p.Open(env); err != nil {
			t.Errorf("Open with the cache: %v", err)
		}
		if !p.Remembered(env) {
			t.Error("Open with the cache did not remember the signature it accepted")
		}
	})
	t.Run("VerifyWith", func(t *testing.T) {
		if err := approval.VerifyWith(odd.Public(), env); err != nil {
			t.Errorf("VerifyWith: %v", err)
		}
	})
	for _, tc := range []struct {
		name  string
		batch []*approval.Envelope
	}{
		{"VerifyBatch of one", []*approval.Envelope{env}},
		{"VerifyBatch among valid records", []*approval.Envelope{good[0], good[1], env, good[2]}},
		{"VerifyBatch that fails, then one by one", []*approval.Envelope{good[0], env, forged, good[1], good[2]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy(true)
			p.VerifyBatch(tc.batch)
			if !p.Remembered(env) {
				t.Error("the batch path did not accept the signature Open accepts")
			}
			for _, g := range good {
				if contains(tc.batch, g) && !p.Remembered(g) {
					t.Error("a valid record of the batch was not remembered")
				}
			}
			if p.Remembered(forged) {
				t.Error("a forged record was remembered")
			}
			if _, err := p.Open(env); err != nil {
				t.Errorf("Open after the batch: %v", err)
			}
		})
	}
}

func contains(envs []*approval.Envelope, env *approval.Envelope) bool {
	for _, e := range envs {
		if e == env {
			return true
		}
	}
	return false
}
