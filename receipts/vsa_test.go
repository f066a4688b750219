package receipts_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// vsaFor is a VSA statement as replay writes it for head and entries.
func vsaFor(head string, entries int, result string) *receipts.VSAStatement {
	st := &receipts.VSAStatement{
		Type:          receipts.StatementV1,
		Subject:       []receipts.Subject{{Name: "prod-write-journal:h", Digest: map[string]string{"sha256": head}}},
		PredicateType: receipts.VSAPredicateV1,
	}
	p := &st.Predicate
	p.Verifier.ID = receipts.VSAVerifierID
	p.TimeVerified = "2025-01-01T00:00:00Z"
	p.ResourceURI = fmt.Sprintf("file:///ci/receipts.jsonl#entries=%d", entries)
	p.Policy = receipts.VSAPolicy{URI: "file:///trust.toml", Digest: map[string]string{"sha256": strings.Repeat("a", 64)}}
	p.VerificationResult, p.VerifiedLevels, p.SlsaVersion, p.DependencyLevels = result, []string{"PRODWRITE_REPLAY_V1"}, "1.0", map[string]uint64{}
	return st
}

func signVSA(t testing.TB, k *keys.Private, st *receipts.VSAStatement) []byte {
	t.Helper()
	env, err := receipts.SignStatement(context.Background(), k, &receipts.Statement{Type: st.Type, Subject: st.Subject, PredicateType: st.PredicateType, Predicate: st.Predicate})
	if err != nil {
		t.Fatal(err)
	}
	b, err := jsonMarshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// Each check of VSA.Verify refuses, with its reason, a VSA that differs
// from a good one in that check alone; the good one verifies.
func TestVSAVerifyRefusesEachMismatch(t *testing.T) {
	ci := keys.FromSeed(bytes.Repeat([]byte{3}, 32))
	other := keys.FromSeed(bytes.Repeat([]byte{4}, 32))
	head := receipts.LineHash([]byte("last line"))
	verify := func(b []byte, pub keys.Public, head string, entries int) error {
		v, err := receipts.ParseVSA(b)
		if err != nil {
			t.Fatalf("ParseVSA: %v", err)
		}
		return v.Verify(pub, head, entries)
	}
	if err := verify(signVSA(t, ci, vsaFor(head, 7, "PASSED")), ci.Public(), head, 7); err != nil {
		t.Fatalf("a good VSA is refused: %v", err)
	}
	edit := func(f func(*receipts.VSAStatement)) []byte {
		st := vsaFor(head, 7, "PASSED")
		f(st)
		return signVSA(t, ci, st)
	}
	good := signVSA(t, ci, vsaFor(head, 7, "PASSED"))
	// One signature byte changed, keeping it base64 and 64 bytes.
	forged := bytes.Replace(good, []byte(`"sig":"`), []byte(`"sig":"B`), 1)
	forged = bytes.Replace(forged, []byte(`"sig":"B`+string(good[bytes.Index(good, []byte(`"sig":"`))+7])), []byte(`"sig":"B`), 1)
	for _, c := range []struct {
		name    string
		b       []byte
		pub     keys.Public
		head    string
		entries int
		want    string
	}{
		{"another key", good, other.Public(), head, 7, "the signature does not verify under key"},
		{"a forged signature", forged, ci.Public(), head, 7, "the signature does not verify"},
		{"another journal head", good, ci.Public(), receipts.LineHash([]byte("edited")), 7, "but the journal's last line hashes to"},
		{"another entry count", good, ci.Public(), head, 8, "resourceUri counts 7 entries, the journal has 8"},
		{"FAILED", edit(func(st *receipts.VSAStatement) { st.Predicate.VerificationResult = "FAILED" }), ci.Public(), head, 7, `verificationResult "FAILED"`},
		{"another statement type", edit(func(st *receipts.VSAStatement) { st.Type = "https://in-toto.io/Statement/v0.1" }), ci.Public(), head, 7, "statement _type"},
		{"another predicate type", edit(func(st *receipts.VSAStatement) { st.PredicateType = receipts.RunPredicateV1 }), ci.Public(), head, 7, "predicateType"},
		{"another verifier", edit(func(st *receipts.VSAStatement) { st.Predicate.Verifier.ID = "x" }), ci.Public(), head, 7, "verifier"},
		{"two subjects", edit(func(st *receipts.VSAStatement) { st.Subject = append(st.Subject, st.Subject[0]) }), ci.Public(), head, 7, "2 subjects"},
		{"no entry count", edit(func(st *receipts.VSAStatement) { st.Predicate.ResourceURI = "file:///j" }), ci.Public(), head, 7, "does not end in #entries=N"},
		{"a padded entry count", edit(func(st *receipts.VSAStatement) { st.Predicate.ResourceURI = "file:///j#entries=07" }), ci.Public(), head, 7, "does not end in #entries=N"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := fmt.Errorf("wrapped: %w", verify(c.b, c.pub, c.head, c.entries))
			var ref *receipts.VSARefusedError
			if !errors.As(err, &ref) {
				t.Fatalf("got %v, want a VSARefusedError", err)
			}
			if !strings.Contains(ref.Reason, c.want) {
				t.Errorf("reason %q, want %q in it", ref.Reason, c.want)
			}
		})
	}
}

// What is no VSA envelope is a MalformedVSAError, never a refusal.
func TestParseVSAMalformed(t *testing.T) {
	ci := keys.FromSeed(bytes.Repeat([]byte{3}, 32))
	env, _ := dsse.Sign(context.Background(), ci, receipts.InTotoPayloadType, []byte(`{"_type":1}`))
	notStatement, _ := jsonMarshal(env)
	for _, b := range []string{"", "not json", `{"payloadType":"x","payload":"!!","signatures":[]}`, string(notStatement),
		`{"payloadType":"x","payload":"e30=","signatures":[],"payloadtype":"y"}`} {
		_, err := receipts.ParseVSA([]byte(b))
		var bad *receipts.MalformedVSAError
		if !errors.As(err, &bad) {
			t.Errorf("ParseVSA(%q) = %v, want a MalformedVSAError", b, err)
		}
	}
}

// JournalHead says what replay's summary says of a journal's head and
// entries: intact, torn, with a line too long and with an empty line.
func TestJournalHeadIsReplays(t *testing.T) {
	w := newWorld(t)
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	rp := &receipts.Replayer{Policy: policy}
	long := strings.Repeat("x", receipts.MaxLine+10)
	j := strings.Join(w.journal, "\n") + "\n"
	for name, in := range map[string]string{
		"intact":          j,
		"torn":            j + w.journal[0],
		"a long last one": j + long + "\n",
		"an empty line":   j + "\n",
		"empty":           "",
	} {
		sum, err := rp.Replay(strings.NewReader(in), func(receipts.Result) {})
		if err != nil && name != "empty" {
			t.Fatalf("%s: %v", name, err)
		}
		head, n, err := receipts.JournalHead(strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		if head != sum.Head || n != sum.Entries {
			t.Errorf("%s: JournalHead %s, %d; replay %s, %d", name, head, n, sum.Head, sum.Entries)
		}
	}
}

// A VSA that replay --vsa wrote verifies exactly against its journal and
// CI's key, and is refused for the journal with a line appended.
func TestReplayVSAVerifies(t *testing.T) {
	w := newWorld(t)
	ci, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	ciKey := filepath.Join(t.TempDir(), "ci.key")
	if err := ci.WriteNew(ciKey); err != nil {
		t.Fatal(err)
	}
	_, b := replayVSA(t, w, w.journal, ciKey)
	v, err := receipts.ParseVSA(b)
	if err != nil {
		t.Fatal(err)
	}
	j := strings.Join(w.journal, "\n") + "\n"
	head, n, _ := receipts.JournalHead(strings.NewReader(j))
	if err := v.Verify(ci.Public(), head, n); err != nil {
		t.Fatalf("replay's own VSA: %v", err)
	}
	head, n, _ = receipts.JournalHead(strings.NewReader(j + w.journal[0] + "\n"))
	if err := v.Verify(ci.Public(), head, n); err == nil {
		t.Error("a VSA verifies for the journal with a line appended")
	}
}

// FuzzParseVSA: the VSA parser and Verify never panic, and what verifies
// is signed by the key and says PASSED for the head.
func FuzzParseVSA(f *testing.F) {
	ci := keys.FromSeed(bytes.Repeat([]byte{3}, 32))
	head := receipts.LineHash([]byte("last line"))
	f.Add(signVSA(f, ci, vsaFor(head, 7, "PASSED")))
	f.Add(signVSA(f, ci, vsaFor(head, 7, "FAILED")))
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"k","sig":"AA=="}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := receipts.ParseVSA(b)
		if err != nil {
			var bad *receipts.MalformedVSAError
			if !errors.As(err, &bad) {
				t.Fatalf("ParseVSA error %v is no MalformedVSAError", err)
			}
			return
		}
		if err := v.Verify(ci.Public(), head, 7); err == nil {
			if v.Statement.Predicate.VerificationResult != "PASSED" || v.Statement.Subject[0].Digest["sha256"] != head {
				t.Fatalf("verified a VSA that does not vouch for the head: %+v", v.Statement)
			}
		}
	})
}
