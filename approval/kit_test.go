package approval_test

// A small kit shared by the approval tests: a fixed cast of principals with
// keys made from fixed seeds, a trust policy built from them, operations
// parsed from TOML the way the registry parses them, and signed plans and
// evidence made with the real DSSE signer.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
)

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// member is one principal of a test policy.
type member struct {
	ID     string
	Roles  []string
	Slack  string
	GitHub string
	// Since and RevokedAt bound when its signatures count (zero: always).
	Since, RevokedAt time.Time
}

// keyFor returns the key of a principal id: the same id always gets the
// same key, so tests are reproducible.
func keyFor(id string) *keys.Private {
	seed := sha256.Sum256([]byte("prod-write approval test key: " + id))
	return keys.FromSeed(seed[:])
}

// policyTOML renders members as a trust.toml.
func policyTOML(members []member) string {
	var b strings.Builder
	b.WriteString("# test policy\n")
	for _, m := range members {
		fmt.Fprintf(&b, "\n[[principal]]\nid = %q\nroles = [", m.ID)
		for i, r := range m.Roles {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", r)
		}
		fmt.Fprintf(&b, "]\nkey = %q\n", keyFor(m.ID).Public().String())
		if m.Slack != "" {
			fmt.Fprintf(&b, "slack = %q\n", m.Slack)
		}
		if m.GitHub != "" {
			fmt.Fprintf(&b, "github = %q\ngithub_id = %d\n", m.GitHub, gitHubID(m.GitHub))
		}
		if !m.Since.IsZero() {
			fmt.Fprintf(&b, "since = %s\n", m.Since.UTC().Format(time.RFC3339))
		}
		if !m.RevokedAt.IsZero() {
			fmt.Fprintf(&b, "revoked_at = %s\n", m.RevokedAt.UTC().Format(time.RFC3339))
		}
	}
	return b.String()
}

// gitHubID is a test member's numeric GitHub user id, one per login in
// any case.
func gitHubID(login string) int64 {
	sum := sha256.Sum256([]byte(strings.ToLower(login)))
	return 1 + int64(binary.BigEndian.Uint32(sum[:4]))
}

func mustPolicy(t tb, members []member) *approval.Policy {
	t.Helper()
	p, err := approval.ParsePolicy("trust.toml", []byte(policyTOML(members)))
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	return p
}

// demoCast is the cast most gate tests use. Two principals hold two roles
// each, so separation of duties is tested on principals the role checks
// alone would let through.
var demoCast = []member{
	{ID: "agent", Roles: []string{"agent"}},
	{ID: "smith", Roles: []string{"operator"}},
	{ID: "olive", Roles: []string{"operator", "approver"}}, // files and approves
	{ID: "pat", Roles: []string{"agent", "approver", "operator", "gera"}, Slack: "UPAT"},
	{ID: "alice", Roles: []string{"approver"}, Slack: "UALICE", GitHub: "alice"},
	{ID: "bob", Roles: []string{"approver"}, Slack: "UBOB", GitHub: "Bob"},
	{ID: "carol", Roles: []string{"approver"}},
	{ID: "gera", Roles: []string{"gera"}},
	{ID: "bridge", Roles: []string{"bridge"}},
	{ID: "runner", Roles: []string{"runner"}},
}

// mustOp parses one operation the way the registry does.
func mustOp(t tb, approvers int, paths []string, mutating bool) *operations.Operation {
	t.Helper()
	var ps []string
	for _, p := range paths {
		ps = append(ps, fmt.Sprintf("%q", p))
	}
	src := fmt.Sprintf(`
[[operation]]
name = "touch"
description = "touch a file"
mutating = %t
program = "/usr/bin/touch"
args = ["/tmp/{target}"]
targets = ["staging"]

[operation.approval]
paths = [%s]
approvers = %d
`, mutating, strings.Join(ps, ", "), approvers)
	ops, err := operations.Parse("ops.toml", []byte(src))
	if err != nil {
		t.Fatalf("operations.Parse: %v", err)
	}
	return ops[0]
}

// planFor returns a signed plan of op by planner; salt makes distinct
// fingerprints for one operation.
func planFor(t tb, op *operations.Operation, planner, salt string) (*operations.Plan, *approval.Envelope) {
	t.Helper()
	b := operations.Bound{
		Operation:       op.Name,
		OperationDigest: op.Digest,
		Target:          "staging",
		Params:          map[string]string{},
		Argv:            []string{"/usr/bin/touch", "/tmp/staging" + salt},
		ProgramSHA256:   "sha256:" + strings.Repeat("ab", 32),
		Cwd:             "/",
		Env:             []operations.EnvVar{},
		Files:           []operations.File{},
	}
	plan := &operations.Plan{
		Version:     operations.PlanVersion,
		Fingerprint: operations.Fingerprint(&b),
		Bound:       b,
		Mutating:    op.IsMutating(),
		Planner:     planner,
		Created:     testNow.Add(-time.Hour),
	}
	return plan, mustSign(t, planner, approval.TypePlan, plan)
}

// testNow is the gate's clock in these tests.
var testNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func mustSign(t tb, signer, payloadType string, v any) *approval.Envelope {
	t.Helper()
	env, err := approval.Sign(keyFor(signer), payloadType, v)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return env
}

func mustID(t tb, env *approval.Envelope) string {
	t.Helper()
	id, err := approval.ID(env)
	if err != nil {
		t.Fatalf("ID: %v", err)
	}
	return id
}

// Record constructors with sensible defaults: issued a minute ago, valid
// for an hour.

func geraGo(fp, by string, uses int) approval.GeraDecision {
	return approval.GeraDecision{Fingerprint: fp, Decision: approval.Go, Uses: uses, Decider: by,
		Issued: testNow.Add(-time.Minute), Expires: testNow.Add(time.Hour)}
}

func geraNoGo(fp, by string) approval.GeraDecision {
	return approval.GeraDecision{Fingerprint: fp, Decision: approval.NoGo, Decider: by,
		Issued: testNow.Add(-time.Minute), Expires: testNow.Add(time.Hour)}
}

func smithRecord(fp, by string) approval.CertaintyRecord {
	return approval.CertaintyRecord{Fingerprint: fp, Summary: "s", Effect: "e", BlastRadius: "b",
		Rollback: "r", Certainty: "high", Filer: by,
		Issued: testNow.Add(-time.Minute), Expires: testNow.Add(time.Hour)}
}

func answer(fp, record, verdict, by string) approval.Answer {
	return approval.Answer{Fingerprint: fp, Record: record, Answer: verdict, Approver: by,
		Issued: testNow.Add(-time.Minute), Expires: testNow.Add(time.Hour)}
}

// flipSignature returns a copy of env whose signature has one bit flipped.
func flipSignature(t tb, env *approval.Envelope, bit int) *approval.Envelope {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	if err != nil {
		t.Fatal(err)
	}
	raw[(bit/8)%len(raw)] ^= 1 << (bit % 8)
	out := *env
	out.Signatures = append(out.Signatures[:0:0], env.Signatures...)
	out.Signatures[0].Sig = base64.StdEncoding.EncodeToString(raw)
	return &out
}

// flipPayload returns a copy of env whose payload has one bit flipped at
// byte i (modulo its length).
func flipPayload(t tb, env *approval.Envelope, i int) *approval.Envelope {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	raw[i%len(raw)] ^= 0x01
	out := *env
	out.Payload = base64.StdEncoding.EncodeToString(raw)
	return &out
}
