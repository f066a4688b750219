package approval_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/dsse"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// fuzzPolicy is the policy the decoder fuzz targets verify against.
var fuzzPolicy = func() *approval.Policy {
	p, err := approval.ParsePolicy("trust.toml", []byte(policyTOML(demoCast)))
	if err != nil {
		panic(err)
	}
	return p
}()

// envelopeSeeds are valid records of every kind, as JSON.
func envelopeSeeds(f *testing.F) [][]byte {
	op := mustOp(f, 1, []string{gera, smith}, true)
	plan, penv := planFor(f, op, "agent", "")
	fp := plan.Fingerprint
	rec := mustSign(f, "smith", approval.TypeSmith, smithRecord(fp, "smith"))
	bridged := answer(fp, mustID(f, rec), approval.Approve, "alice")
	bridged.Channel = &approval.Channel{Kind: "slack", SlackUser: "UALICE"}
	envs := []*approval.Envelope{
		penv, rec,
		mustSign(f, "gera", approval.TypeGera, geraGo(fp, "gera", 2)),
		mustSign(f, "gera", approval.TypeGera, geraNoGo(fp, "gera")),
		mustSign(f, "alice", approval.TypeTrinity, answer(fp, mustID(f, rec), approval.Approve, "alice")),
		mustSign(f, "bridge", approval.TypeTrinity, bridged),
		mustSign(f, "agent", approval.TypeWithdraw, approval.Withdrawal{Fingerprint: fp, Planner: "agent", Issued: testNow}),
	}
	var out [][]byte
	for _, e := range envs {
		b, err := json.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return append(out, []byte(`{}`), []byte(`{"payloadType":"x","payload":"","signatures":[]}`),
		[]byte(`{"payloadType":"x","payload":"e30=","signatures":[{"keyid":"","sig":"!!"}]}`), []byte(`null`))
}

// FuzzOpen feeds arbitrary bytes, parsed as a DSSE envelope, to
// Policy.Open and, when it opens, to Signed.Decode for every record kind.
// Nothing may panic; every failure is a refusal of the two kinds Open
// documents; an envelope that opens has the ID that ID computes and
// verifies with its signer's key.
func FuzzOpen(f *testing.F) {
	for _, s := range envelopeSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var env approval.Envelope
		if json.Unmarshal(data, &env) != nil {
			return
		}
		id, idErr := approval.ID(&env)
		s, err := fuzzPolicy.Open(&env)
		if err != nil {
			r, ok := refusal.As(err)
			if !ok || (r.Code != refusal.SignatureInvalid && r.Code != refusal.PrincipalUnknown) {
				t.Fatalf("Open failed with %v, want signature_invalid or principal_unknown", err)
			}
			return
		}
		if idErr != nil || s.ID != id {
			t.Fatalf("opened record has ID %s, ID() gives %s (%v)", s.ID, id, idErr)
		}
		if s.Signer == nil || s.Type != env.PayloadType {
			t.Fatalf("opened record has signer %v type %q", s.Signer, s.Type)
		}
		if err := approval.VerifyWith(s.Signer.Public(), &env); err != nil {
			t.Fatalf("Open accepted what VerifyWith refuses: %v", err)
		}
		for _, v := range []any{&approval.GeraDecision{}, &approval.CertaintyRecord{}, &approval.Answer{}, &approval.Withdrawal{}, &operations.Plan{}} {
			if err := s.Decode(v); err != nil && !refusal.Is(err, refusal.SignatureInvalid) {
				t.Fatalf("Decode failed with %v, want a signature_invalid refusal", err)
			}
		}
	})
}

// FuzzSignedPayload signs arbitrary payloads with a key of the policy: Open
// must accept every one of them (a valid signature is valid whatever it
// covers), Decode must not panic, and flipping any one bit of the payload
// or the signature must make Open refuse.
func FuzzSignedPayload(f *testing.F) {
	for _, s := range envelopeSeeds(f) {
		var env approval.Envelope
		if json.Unmarshal(s, &env) == nil && env.Payload != "" {
			body, _ := base64.StdEncoding.DecodeString(env.Payload)
			f.Add(env.PayloadType, body, uint16(0))
		}
	}
	f.Add("", []byte{}, uint16(7))
	f.Add(approval.TypeGera, []byte(`{"fingerprint":1}`), uint16(1000))
	key := keyFor("gera")
	f.Fuzz(func(t *testing.T, payloadType string, body []byte, bit uint16) {
		env, err := dsse.Sign(context.Background(), key, payloadType, body)
		if err != nil {
			t.Fatal(err)
		}
		s, err := fuzzPolicy.Open(env)
		if err != nil {
			t.Fatalf("Open refused a validly signed record: %v", err)
		}
		if s.Signer.ID != "gera" {
			t.Fatalf("signer %s, want gera", s.Signer.ID)
		}
		for _, v := range []any{&approval.GeraDecision{}, &approval.CertaintyRecord{}, &approval.Answer{}, &approval.Withdrawal{}, &operations.Plan{}} {
			_ = s.Decode(v)
		}
		if len(s.Payload) > 0 {
			bad := flipPayload(t, env, int(bit))
			if _, err := fuzzPolicy.Open(bad); !refusal.Is(err, refusal.SignatureInvalid) {
				t.Fatalf("payload with bit flipped at byte %d: Open gave %v, want signature_invalid", int(bit)%len(s.Payload), err)
			}
		}
		if _, err := fuzzPolicy.Open(flipSignature(t, env, int(bit))); !refusal.Is(err, refusal.SignatureInvalid) {
			t.Fatalf("signature with bit %d flipped: Open gave %v, want signature_invalid", int(bit)%512, err)
		}
	})
}

// FuzzDecodePlan: a plan that decodes is one whose fingerprint is the one
// its inputs give, signed by its own planner, an agent.
func FuzzDecodePlan(f *testing.F) {
	for _, s := range envelopeSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var env approval.Envelope
		if json.Unmarshal(data, &env) != nil {
			return
		}
		plan, s, err := fuzzPolicy.DecodePlan(&env)
		if err != nil {
			if _, ok := refusal.As(err); !ok && !strings.HasPrefix(err.Error(), "plan version") {
				t.Fatalf("DecodePlan failed with %T %v, want a refusal", err, err)
			}
			return
		}
		if s.Type != approval.TypePlan || !s.Signer.Has(approval.RoleAgent) || plan.Planner != s.Signer.ID {
			t.Fatalf("decoded plan: type %s, signer %s, planner %s", s.Type, s.Signer.ID, plan.Planner)
		}
		if plan.Fingerprint != operations.Fingerprint(&plan.Bound) {
			t.Fatalf("decoded plan claims %s, its inputs give %s", plan.Fingerprint, operations.Fingerprint(&plan.Bound))
		}
	})
}

// FuzzParsePolicy: ParsePolicy never panics, fails only with a
// *ConfigError, and a policy it accepts maps every id, key, Slack user and
// GitHub login (case-insensitively) to exactly one principal, with known
// roles and a parseable key.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(policyTOML(demoCast)))
	f.Add([]byte(policyTOML(propCast)))
	f.Add([]byte(""))
	f.Add([]byte("[[principal]]\nid = \"a\"\nroles = [\"agent\"]\nkey = \"" + keyFor("a").Public().String() + "\"\ngithub = \"A\"\n" +
		"[[principal]]\nid = \"b\"\nroles = [\"approver\"]\nkey = \"" + keyFor("b").Public().String() + "\"\ngithub = \"a\"\n"))
	f.Add([]byte("[[principal]]\nid = \"a\"\nroles = [\"agent\"]\nkey = \"" + keyFor("a").Public().String() + "\"\ngithub = \"A\"\ngithub_id = 7\n" +
		"[[principal]]\nid = \"b\"\nroles = [\"approver\"]\nkey = \"" + keyFor("b").Public().String() + "\"\ngithub = \"b\"\ngithub_id = 7\n"))
	f.Add([]byte("[[principal]]\nid = \"a\"\nroles = [\"agent\"]\nkey = \"ed25519:AAAA\"\nextra = 1\n"))
	f.Add([]byte("principal = [{id = \"a\", roles = [\"agent\"], key = \"" + keyFor("a").Public().String() + "\", slack = \"U1\"}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := approval.ParsePolicy("trust.toml", data)
		if err != nil {
			var ce *approval.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("ParsePolicy failed with %T %v, want a *ConfigError", err, err)
			}
			return
		}
		ids, ks, slack, gh := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, pr := range p.Principals {
			if pr.ID == "" || ids[pr.ID] {
				t.Fatalf("id %q empty or not unique", pr.ID)
			}
			ids[pr.ID] = true
			pub, err := keys.ParsePublic(pr.Key)
			if err != nil || !bytes.Equal(pub, pr.Public()) {
				t.Fatalf("principal %q: key %q does not parse to its public key (%v)", pr.ID, pr.Key, err)
			}
			if ks[pub.ID()] {
				t.Fatalf("key of %q is another principal's too", pr.ID)
			}
			ks[pub.ID()] = true
			if len(pr.Roles) == 0 {
				t.Fatalf("principal %q has no role", pr.ID)
			}
			for _, r := range pr.Roles {
				if !slices.Contains([]string{"agent", "operator", "approver", "gera", "bridge", "runner"}, r) {
					t.Fatalf("principal %q has unknown role %q", pr.ID, r)
				}
			}
			if pr.Slack != "" {
				if slack[pr.Slack] {
					t.Fatalf("slack user %q maps to two principals", pr.Slack)
				}
				slack[pr.Slack] = true
				if q, ok := p.BySlack(pr.Slack); !ok || q != pr {
					t.Fatalf("BySlack(%q) does not find %q", pr.Slack, pr.ID)
				}
			}
			if pr.GitHub != "" {
				l := strings.ToLower(pr.GitHub)
				if gh[l] {
					t.Fatalf("github login %q maps to two principals", pr.GitHub)
				}
				gh[l] = true
				if q, ok := p.ByGitHub(strings.ToUpper(pr.GitHub)); !ok || q != pr {
					t.Fatalf("ByGitHub(%q) does not find %q", strings.ToUpper(pr.GitHub), pr.ID)
				}
			}
			// A GitHub login is always bound to a numeric id, which maps
			// to this principal alone.
			if (pr.GitHub == "") != (pr.GitHubID == 0) || pr.GitHubID < 0 {
				t.Fatalf("principal %q: github %q with github_id %d", pr.ID, pr.GitHub, pr.GitHubID)
			}
			if pr.GitHubID != 0 {
				if q, ok := p.ByGitHubID(pr.GitHubID); !ok || q != pr {
					t.Fatalf("ByGitHubID(%d) does not find %q", pr.GitHubID, pr.ID)
				}
			}
			if q, ok := p.ByID(pr.ID); !ok || q != pr {
				t.Fatalf("ByID(%q) does not find it", pr.ID)
			}
			if q, ok := p.ByKey(pub.ID()); !ok || q != pr {
				t.Fatalf("ByKey does not find %q", pr.ID)
			}
		}
	})
}
