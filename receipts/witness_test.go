package receipts_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// testWitness is a witness's cosignature/v1 signer (the library's) and
// the verifier key it publishes.
type testWitness struct {
	name   string
	vkey   string
	signer note.Signer
	skey   string
}

func newTestWitness(t *testing.T, name string) testWitness {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	cosigV, err := fnote.VKeyToCosignatureV1(vkey)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fnote.NewSignerForCosignatureV1(skey)
	if err != nil {
		t.Fatal(err)
	}
	return testWitness{name: name, vkey: cosigV, signer: s, skey: skey}
}

// witnessPolicy is a policy trusting k as the runner and ws as witnesses.
func witnessPolicy(t *testing.T, k *keys.Private, ws ...testWitness) *approval.Policy {
	t.Helper()
	text := fmt.Sprintf("[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n", k.Public().String())
	for _, w := range ws {
		text += fmt.Sprintf("\n[[witness]]\nkey = %q\n", w.vkey)
	}
	p, err := approval.ParsePolicy("trust.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// cosign adds the witnesses' cosignatures to the note b.
func cosign(t *testing.T, b []byte, ws ...testWitness) []byte {
	t.Helper()
	var signers []note.Signer
	for _, w := range ws {
		signers = append(signers, w.signer)
	}
	return cosignWith(t, b, signers...)
}

// TestWitnessCosignatures: replay --witnesses K trusts a checkpoint note
// only when K distinct witnesses of the trust policy cosign it, by
// C2SP tlog-cosignature, besides the runner; each way to fake a quorum
// is refused, and the journal is then not judged against the note.
func TestWitnessCosignatures(t *testing.T) {
	k, _ := chRunner(t)
	lines := chJournal(t, k, "host-a", 4)
	tree, err := receipts.TreeOf(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	origin := receipts.NoteOrigin("host-a")
	cp, err := receipts.SignNoteCheckpoint(k, origin, tree, 4)
	if err != nil {
		t.Fatal(err)
	}
	older, err := receipts.SignNoteCheckpoint(k, origin, tree, 3)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c, stranger := newTestWitness(t, "witness-a.example"), newTestWitness(t, "witness-b.example"), newTestWitness(t, "witness-c.example"), newTestWitness(t, "stranger.example")
	policy := witnessPolicy(t, k, a, b, c)

	// A cosignature by b over the older checkpoint, moved onto this one.
	_, moved, _ := strings.Cut(string(cosign(t, older, b)), "\n\n")
	moved = moved[strings.Index(moved, "— "+b.name):]

	for _, tc := range []struct {
		name string
		note []byte
		k    int
		ok   bool
		want string
	}{
		{"two of three met", cosign(t, cp, a, c), 2, true, ""},
		{"three of three met", cosign(t, cp, c, b, a), 3, true, ""},
		{"none asked, none needed", cp, 0, true, ""},
		{"two of three short", cosign(t, cp, a), 2, false, "cosigned by 1 of the trust policy's witnesses"},
		{"none cosigns", cp, 1, false, "cosigned by none"},
		{"a cosignature by an unknown key", cosign(t, cp, a, stranger), 2, false, "cosigned by 1 of"},
		{"a duplicate witness counted twice", cosign(t, cp, a, a), 2, false, "cosigned by 1 of"},
		{"a cosignature over another checkpoint", append(cosign(t, cp, a), moved...), 2, false, "witness-b.example's cosignature does not verify over this checkpoint"},
		{"a malformed cosignature line", append(cosign(t, cp, a, b), "— witness-c.example !!!notbase64\n"...), 2, false, "does not read"},
		{"a cosignature line cut short", append(cosign(t, cp, a, b), "— witness-c.example AAAA\n"...), 2, false, "does not read"},
		{"more asked than the policy names", cosign(t, cp, a, b, c), 4, false, "the trust policy names 3 witnesses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, err := receipts.VerifyCosignatures(tc.note, policy, tc.k, time.Time{})
			var we *receipts.WitnessError
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v\n%s", err, tc.note)
			case tc.ok && len(names) < tc.k:
				t.Fatalf("met with %v, %d asked for", names, tc.k)
			case !tc.ok && err == nil:
				t.Fatalf("accepted (%v):\n%s", names, tc.note)
			case !tc.ok && (!errors.As(err, &we) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("refused with %v; want a *WitnessError saying %q", err, tc.want)
			}
			// replay --checkpoint NOTE --witnesses K: the note counts
			// only with its quorum.
			var res []receipts.Result
			rp := &receipts.Replayer{Policy: policy, CheckpointNote: tc.note, Witnesses: tc.k}
			sum, err := rp.Replay(strings.NewReader(strings.Join(lines, "\n")+"\n"), func(r receipts.Result) { res = append(res, r) })
			if err != nil {
				t.Fatal(err)
			}
			if sum.OK != tc.ok {
				t.Fatalf("replay ok %v; want %v: %v", sum.OK, tc.ok, chProblems(res))
			}
			if !tc.ok {
				chWant(t, res, sum, map[string][]string{"checkpoint": {receipts.BadSignature}})
			}
		})
	}
}

// TestWitnessKeysParseStrictly: trust.toml's [[witness]] keys are
// cosignature/v1 verifier keys, each witness once; a broken one names
// its file and line.
func TestWitnessKeysParseStrictly(t *testing.T) {
	k, _ := chRunner(t)
	a, b := newTestWitness(t, "witness-a.example"), newTestWitness(t, "witness-b.example")
	_, plain, err := note.GenerateKey(rand.Reader, "plain.example")
	if err != nil {
		t.Fatal(err)
	}
	name, rest, _ := strings.Cut(a.vkey, "+")
	_, key, _ := strings.Cut(rest, "+")
	// a's key under another name: its cosignature would verify under
	// either (the signed message does not hold the name), so one
	// witness would count twice.
	relabelled := newTestWitness(t, "alias.example")
	if v, err := fnote.NewVerifierForCosignatureV1("alias.example+00000000+" + key); err == nil {
		relabelled.vkey = fmt.Sprintf("alias.example+%08x+%s", v.KeyHash(), key)
	} else {
		t.Fatal(err)
	}
	head := fmt.Sprintf("[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n", k.Public().String())
	for _, tc := range []struct {
		name, witnesses, want string
	}{
		{"a plain Ed25519 note key", fmt.Sprintf("[[witness]]\nkey = %q\n", plain), "trust.toml:7: witness 1: key \"" + plain + "\" is of type 0x01"},
		{"a wrong key hash", fmt.Sprintf("[[witness]]\nkey = %q\n", name+"+00000000+"+key), "trust.toml:7: witness 1: key \"" + name + "+00000000+" + key + "\": its hash 00000000 is not the key's"},
		{"no key", "[[witness]]\n", "trust.toml:6: witness 1: key is required"},
		{"not a vkey", "[[witness]]\nkey = \"witness\"\n", "trust.toml:7: witness 1: key \"witness\" is not a signed-note verifier key"},
		{"one name twice", fmt.Sprintf("[[witness]]\nkey = %q\n\n[[witness]]\nkey = %q\n", a.vkey, a.vkey), "trust.toml:10: witness 2: name \"witness-a.example\" is already witness 1's"},
		{"one key under two names", fmt.Sprintf("[[witness]]\nkey = %q\n[[witness]]\nkey = %q\n", a.vkey, relabelled.vkey), "trust.toml:9: witness 2: its public key is already witness 1's"},
		{"an unknown field", fmt.Sprintf("[[witness]]\nkey = %q\nurl = \"https://w.example\"\n", b.vkey), "trust.toml:8: unknown key \"witness.url\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := approval.ParsePolicy("trust.toml", []byte(head+"\n"+tc.witnesses))
			var ce *approval.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want a *ConfigError with %q", err, tc.want)
			}
		})
	}
	if _, err := approval.ParsePolicy("trust.toml", []byte(head+fmt.Sprintf("\n[[witness]]\nkey = %q\n[[witness]]\nkey = %q\n", a.vkey, b.vkey))); err != nil {
		t.Fatalf("two witnesses: %v", err)
	}
}

// TestWitnessedCheckpointCatchesRewrite: a journal rewritten from the
// middle, every later entry re-chained and re-signed with the runner key,
// verifies on its own, and the runner key can sign a note of its tree;
// against the note two witnesses cosigned before the rewrite it is
// refused, and the note the runner key signs for it carries no quorum
// (nor one moved from the witnessed note).
func TestWitnessedCheckpointCatchesRewrite(t *testing.T) {
	w, _ := chWorld(t)
	a, b := newTestWitness(t, "witness-a.example"), newTestWitness(t, "witness-b.example")
	trust, err := os.ReadFile(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := approval.ParsePolicy("trust.toml", fmt.Appendf(trust, "\n[[witness]]\nkey = %q\n\n[[witness]]\nkey = %q\n", a.vkey, b.vkey))
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := receipts.Decode([]byte(w.journal[0]))
	if err != nil {
		t.Fatal(err)
	}
	origin := receipts.NoteOrigin(first.Host)
	noteOf := func(lines []string) []byte {
		tree, err := receipts.TreeOf(strings.NewReader(strings.Join(lines, "\n") + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := receipts.SignNoteCheckpoint(w.runner, origin, tree, uint64(len(lines)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	replay := func(lines []string, note []byte) ([]receipts.Result, receipts.Summary) {
		var res []receipts.Result
		rp := &receipts.Replayer{Policy: policy, CheckpointNote: note, Witnesses: 2}
		sum, err := rp.Replay(strings.NewReader(strings.Join(lines, "\n")+"\n"), func(r receipts.Result) { res = append(res, r) })
		if err != nil {
			t.Fatal(err)
		}
		return res, sum
	}
	witnessed := cosign(t, noteOf(w.journal), a, b)
	if res, sum := replay(w.journal, witnessed); !sum.OK {
		t.Fatalf("the journal against its witnessed note: %v", chProblems(res))
	}
	rewritten := w.edit(w.journal, 1, w.runner, true, func(r *receipts.Receipt) { r.Outcome.ExitCode = 7 })
	if res, sum := chReplay(t, policy, nil, rewritten); !sum.OK {
		t.Fatalf("the rewrite does not verify on its own, so it proves nothing: %v", chProblems(res))
	}
	res, sum := replay(rewritten, witnessed)
	chWant(t, res, sum, map[string][]string{"checkpoint": {receipts.ChainBroken}})

	forged := noteOf(rewritten)
	res, sum = replay(rewritten, forged)
	chWant(t, res, sum, map[string][]string{"checkpoint": {receipts.BadSignature}})
	_, sigs, _ := strings.Cut(string(witnessed), "\n\n")
	_, cosigs, _ := strings.Cut(sigs, "\n")
	res, sum = replay(rewritten, append(forged, cosigs...))
	chWant(t, res, sum, map[string][]string{"checkpoint": {receipts.BadSignature}})
}

// backdated is w's cosignature/v1 signer as the library's, but with its
// signed timestamp at: the format of c2sp.org/tlog-cosignature, written
// here only because the library's signer always signs the present.
type backdated struct {
	note.Signer
	key ed25519.PrivateKey
	at  time.Time
}

func (w testWitness) signedAt(t *testing.T, at time.Time) backdated {
	t.Helper()
	// PRIVATE+KEY+NAME+HASH+BASE64, whose BASE64 may hold a "+".
	fields := strings.SplitN(w.skey, "+", 5)
	raw, err := base64.StdEncoding.DecodeString(fields[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize {
		t.Fatalf("the witness's key %q: %v", w.name, err)
	}
	return backdated{Signer: w.signer, key: ed25519.NewKeyFromSeed(raw[1:]), at: at}
}

func (b backdated) Sign(msg []byte) ([]byte, error) {
	ts := uint64(b.at.Unix())
	sig := binary.BigEndian.AppendUint64(nil, ts)
	return append(sig, ed25519.Sign(b.key, []byte(fmt.Sprintf("cosignature/v1\ntime %d\n%s", ts, msg)))...), nil
}

// cosignWith adds the signers' cosignatures to the note b.
func cosignWith(t *testing.T, b []byte, signers ...note.Signer) []byte {
	t.Helper()
	text, _, _ := strings.Cut(string(b), "\n\n")
	var lines string
	for _, s := range signers {
		signed, err := note.Sign(&note.Note{Text: text + "\n"}, s)
		if err != nil {
			t.Fatal(err)
		}
		_, sig, _ := strings.Cut(string(signed), "\n\n")
		lines += sig
	}
	return append(append([]byte(nil), b...), lines...)
}

// replay --witness-max-age: a cosignature made before the verifier's
// bound (its signed timestamp) counts for nothing, so a quorum of old
// cosignatures is no quorum; fresh ones still count, and without a bound
// an old one counts as before. The backdated line verifies (the library's
// verifier): it is refused for its age alone.
func TestWitnessCosignaturesFresh(t *testing.T) {
	k, _ := chRunner(t)
	lines := chJournal(t, k, "host-a", 3)
	tree, err := receipts.TreeOf(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := receipts.SignNoteCheckpoint(k, receipts.NoteOrigin("host-a"), tree, 3)
	if err != nil {
		t.Fatal(err)
	}
	a, b := newTestWitness(t, "witness-a.example"), newTestWitness(t, "witness-b.example")
	policy := witnessPolicy(t, k, a, b)
	now := time.Now()
	old := now.Add(-48 * time.Hour)
	since := now.Add(-24 * time.Hour)
	oneOld := cosignWith(t, cp, a.signer, b.signedAt(t, old))
	bothOld := cosignWith(t, cp, a.signedAt(t, old), b.signedAt(t, old))
	for _, tc := range []struct {
		name  string
		note  []byte
		k     int
		since time.Time
		want  string // "" when met
	}{
		{"two fresh", cosign(t, cp, a, b), 2, since, ""},
		{"old ones count without a bound", bothOld, 2, time.Time{}, ""},
		{"one old, two asked", oneOld, 2, since, "cosigned by 1 of the trust policy's witnesses (witness-a.example); 2 asked for; cosigned before"},
		{"one old, one asked", oneOld, 1, since, ""},
		{"both old", bothOld, 1, since, "not counted: witness-a.example, witness-b.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, err := receipts.VerifyCosignatures(tc.note, policy, tc.k, tc.since)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && len(names) < tc.k:
				t.Fatalf("met with %v", names)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v (%v), want refused saying %q", err, names, tc.want)
			}
		})
	}
	// Through the replayer: a quorum of old cosignatures fails the
	// checkpoint as bad_signature.
	rp := &receipts.Replayer{Policy: policy, CheckpointNote: bothOld, Witnesses: 2, WitnessedSince: since}
	sum, err := rp.Replay(strings.NewReader(strings.Join(lines, "\n")+"\n"), func(receipts.Result) {})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Failed == 0 {
		t.Fatalf("replayed against a note only old cosignatures reach: %+v", sum)
	}
}
