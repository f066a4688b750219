package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/servicecall"
	"github.com/prod-write/prod-write/pkg/testservers"
	"github.com/prod-write/prod-write/receipts"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// replay --checkpoint NOTE --witnesses K: the note counts only with K
// cosignatures by witnesses of the trust policy; K more than it names,
// or with a DSSE checkpoint, is bad usage.
func TestReplayWitnesses(t *testing.T) {
	w := newAPIWorld(t)
	skey, vkey, err := note.GenerateKey(rand.Reader, "witness.example")
	if err != nil {
		t.Fatal(err)
	}
	cosigV, err := fnote.VKeyToCosignatureV1(vkey)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := fnote.NewSignerForCosignatureV1(skey)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := os.OpenFile(filepath.Join(w.h.dir, "trust.toml"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(tf, "\n[[witness]]\nkey = %q\n", cosigV); err != nil {
		t.Fatal(err)
	}
	tf.Close()
	runNoops(t, w, "one")
	head, err := localapi.API{Env: &w.local.Env}.ReceiptsCheckpoint(context.Background(), api.ReceiptsCheckpointRequest{Note: true})
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ := strings.Cut(head.Note, "\n\n")
	cs, err := note.Sign(&note.Note{Text: text + "\n"}, signer)
	if err != nil {
		t.Fatal(err)
	}
	_, cosig, _ := strings.Cut(string(cs), "\n\n")
	dir := t.TempDir()
	plain, cosigned := filepath.Join(dir, "plain.note"), filepath.Join(dir, "cosigned.note")
	for f, b := range map[string]string{plain: head.Note, cosigned: head.Note + cosig} {
		if err := os.WriteFile(f, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--checkpoint", cosigned, "--witnesses", "1"}, 0, ""},
		{[]string{"--checkpoint", plain}, 0, ""},
		{[]string{"--checkpoint", plain, "--witnesses", "1"}, 1, "checkpoint note witnesses: cosigned by none"},
		{[]string{"--checkpoint", cosigned, "--witnesses", "2"}, 64, "names 1 witnesses"},
		{[]string{"--witnesses", "1"}, 64, "give one"},
		{[]string{"--checkpoint", cosigned, "--witnesses", "-1"}, 64, "0 or more"},
		{[]string{"--checkpoint", cosigned, "--witnesses", "1", "--witness-max-age", "1h"}, 0, ""},
		{[]string{"--checkpoint", cosigned, "--witness-max-age", "1h"}, 64, "with --witnesses"},
	} {
		code, stdout, stderr := w.h.run(append([]string{"replay"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("replay %v: exit %d; want %d with %q\n%s%s", tc.args, code, tc.code, tc.want, stdout, stderr)
		}
	}
	// Two days on (the CLI's clock), the witness's cosignature is older
	// than a day: no quorum within that bound, still one without it.
	w.setNow(w.h.now.Add(48 * time.Hour))
	if code, stdout, stderr := w.h.run("replay", "--checkpoint", cosigned, "--witnesses", "1", "--witness-max-age", "24h"); code != 1 || !strings.Contains(stdout+stderr, "so not counted: witness.example") {
		t.Errorf("replay with a day-old bound on a two-day-old cosignature: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := w.h.run("replay", "--checkpoint", cosigned, "--witnesses", "1"); code != 0 {
		t.Errorf("replay of the same without the bound: exit %d\n%s%s", code, stdout, stderr)
	}
}

// receipts checkpoint --witness sends the head's note to the witnesses of
// prod-write.toml: the transparency-dev omniwitness cosigns it, a witness
// that is down and one with no key in trust.toml are warnings, and the
// cosignature kept is in what receipts checkpoint --note prints, which
// replay --witnesses 1 then trusts. A newer head carries no cosignature
// until the service's cadence sends it (localapi.WitnessLoop), which reads only the
// journal's new lines.
func TestReceiptsCheckpointWitness(t *testing.T) {
	w := newAPIWorld(t)
	c, err := w.local.Config()
	if err != nil {
		t.Fatal(err)
	}
	k, err := keys.Load(c.RunnerKey)
	if err != nil {
		t.Fatal(err)
	}
	origin := receipts.NoteOrigin(runner.JournalHost(c.Host))
	_, logVKey, err := receipts.NoteVerifier(origin, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	omniURL, omniKey := testservers.Omniwitness(t, "omni.test", origin, logVKey)
	_, plain, err := note.GenerateKey(rand.Reader, "down.test")
	if err != nil {
		t.Fatal(err)
	}
	downKey, err := fnote.VKeyToCosignatureV1(plain)
	if err != nil {
		t.Fatal(err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	appendTo := func(name, text string) {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(w.h.dir, name), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := io.WriteString(f, text); err != nil {
			t.Fatal(err)
		}
	}
	appendTo("trust.toml", fmt.Sprintf("\n[[witness]]\nkey = %q\n\n[[witness]]\nkey = %q\n", omniKey, downKey))
	appendTo("prod-write.toml", fmt.Sprintf("\n[[witness]]\nname = \"omni.test\"\nurl = %q\n\n[[witness]]\nname = \"down.test\"\nurl = %q\n\n[[witness]]\nname = \"nokey.test\"\nurl = \"https://nokey.invalid\"\n", omniURL, down.URL))
	runNoops(t, w, "one")

	code, stdout, stderr := w.h.run("receipts", "checkpoint", "--witness")
	if code != 0 || !strings.Contains(stderr, "witness omni.test cosigned the checkpoint of 2 entries") ||
		!strings.Contains(stderr, "warning: witness down.test:") || !strings.Contains(stderr, "warning: witness nokey.test: no [[witness]] key") {
		t.Fatalf("checkpoint --witness: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "\n— omni.test ") {
		t.Fatalf("the note printed carries no cosignature of omni.test:\n%s", stdout)
	}
	dir := t.TempDir()
	replayWitnessed := func(name string, k string) (int, string) {
		t.Helper()
		code, note, stderr := w.h.run("receipts", "checkpoint", "--note")
		if code != 0 {
			t.Fatal(stderr)
		}
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(note), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := w.h.run("replay", "--checkpoint", file, "--witnesses", k)
		return code, note + stdout + stderr
	}
	if code, out := replayWitnessed("one.note", "1"); code != 0 {
		t.Fatalf("replay --witnesses 1 of the cosigned head: exit %d\n%s", code, out)
	}
	if code, out := replayWitnessed("one.note", "2"); code != 1 || !strings.Contains(out, "cosigned by 1 of the trust policy's witnesses (omni.test); 2 asked for") {
		t.Fatalf("replay --witnesses 2 with one witness up: exit %d\n%s", code, out)
	}
	runNoops(t, w, "two")
	if code, out := replayWitnessed("two.note", "1"); code != 1 || !strings.Contains(out, "cosigned by none") {
		t.Fatalf("a head no witness saw yet: exit %d\n%s", code, out)
	}

	// The service's cadence: as soon as one receipt is new, every turn.
	c2, err := config.Load(filepath.Join(w.h.dir, "prod-write.toml"))
	if err != nil {
		t.Fatal(err)
	}
	c2.Service.WitnessEvery, c2.Service.WitnessInterval = 1, "1s"
	var logged bytes.Buffer
	st := &servicecall.State{Cfg: c2, Log: log.New(&syncWriter{w: &logged}, "", 0)}
	if err := st.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { localapi.WitnessLoop(ctx, st); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		states, err := localapi.WitnessStore(c2).Load()
		if err != nil {
			t.Fatal(err)
		}
		if states["omni.test"].Size == 4 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("the cadence sent nothing in 20s: %+v\n%s", states, logged.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done
	if code, out := replayWitnessed("two.note", "1"); code != 0 {
		t.Fatalf("the head the cadence sent: exit %d\n%s", code, out)
	}
	if s := logged.String(); !strings.Contains(s, "witnesses: checkpoint of 4 entries: witness down.test:") {
		t.Errorf("the witness that is down is not logged:\n%s", s)
	}

	// doctor reads what the service kept: the witness that is down and
	// the one with no key are warnings, the one that cosigned is nothing.
	doctorSays := func() map[string]string {
		t.Helper()
		_, stdout, stderr := w.h.run("doctor", "--json")
		var doc struct {
			Findings []struct{ Severity, Check, Message string }
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("doctor --json: %v\n%s%s", err, stdout, stderr)
		}
		says := map[string]string{}
		for _, f := range doc.Findings {
			if strings.HasPrefix(f.Check, "witness-") {
				says[f.Check] += f.Severity + ": " + f.Message + "\n"
			}
		}
		return says
	}
	says := doctorSays()
	if !strings.Contains(says["witness-failing"], "warning: the last checkpoint sent to witness down.test") ||
		!strings.Contains(says["witness-unkeyed"], "warning: witness nokey.test has no key") || strings.Contains(fmt.Sprint(says), "omni.test") || says["witness-ahead"] != "" {
		t.Fatalf("doctor on the witnesses: %v", says)
	}
	// At the gate (docs/adr/0054-the-gate-asks-the-witnesses.md): an export
	// proved against the checkpoint the real witness cosigned carries its
	// cosignature, and verifies alone with 1 of the policy's witnesses
	// asked for, not 2. A run after that checkpoint is left out. An export
	// the runner key signs of a head no witness saw has no quorum; and a
	// journal rewritten by the runner key's holder is refused against the
	// witnessed checkpoint at export, and its own checkpoint has no quorum
	// at the gate.
	runNoops(t, w, "three")
	pub := k.Public().String()
	trust := filepath.Join(w.h.dir, "trust.toml")
	witnessed, fresh := filepath.Join(dir, "witnessed.jsonl"), filepath.Join(dir, "fresh.jsonl")
	if code, stdout, stderr := w.h.run("receipts", "export", "--in-toto", "--proofs", "--witnessed", "--out", witnessed); code != 0 ||
		!strings.Contains(stderr, "1 runs after the witnessed checkpoint left out") || !strings.Contains(stderr, "2 runs exported") || !strings.Contains(stderr, "--witnesses K") {
		t.Fatalf("export --witnessed: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := w.h.run("receipts", "verify-export", witnessed, "--pub", pub, "--trust", trust, "--witnesses", "1"); code != 0 || !strings.Contains(stdout, "each checkpoint cosigned by at least 1 witnesses") {
		t.Fatalf("verify-export --witnesses 1: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := w.h.run("receipts", "verify-export", witnessed, "--pub", pub, "--trust", trust, "--witnesses", "2"); code != 77 || !strings.Contains(stdout+stderr, "cosigned by 1 of the trust policy's witnesses (omni.test); 2 asked for") {
		t.Fatalf("verify-export --witnesses 2: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := w.h.run("receipts", "export", "--in-toto", "--proofs", "--out", fresh); code != 0 {
		t.Fatalf("export --proofs: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := w.h.run("receipts", "verify-export", fresh, "--pub", pub, "--trust", trust, "--witnesses", "1"); code != 77 || !strings.Contains(stdout+stderr, "cosigned by none") {
		t.Fatalf("verify-export --witnesses 1 of a head no witness saw: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := w.h.run("receipts", "verify-export", fresh, "--pub", pub); code != 0 {
		t.Fatalf("verify-export of a head no witness saw, with no quorum asked for: exit %d\n%s%s", code, stdout, stderr)
	}
	kept, err := os.ReadFile(c.JournalPath())
	if err != nil {
		t.Fatal(err)
	}
	var rewritten []string
	prev := ""
	for i, line := range strings.SplitAfter(strings.TrimSuffix(string(kept), "\n"), "\n") {
		_, r, err := receipts.Decode([]byte(strings.TrimSuffix(line, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			r.Time = r.Time.Add(time.Second)
		}
		if i > 0 {
			r.Prev = prev
		}
		env, err := approval.Sign(k, receipts.PayloadType, r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(env)
		prev = receipts.LineHash(b)
		rewritten = append(rewritten, string(b)+"\n")
	}
	if err := os.WriteFile(c.JournalPath(), []byte(strings.Join(rewritten, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := w.h.run("receipts", "export", "--in-toto", "--proofs", "--witnessed", "--out", witnessed); code != 65 || !strings.Contains(stderr, "has another root than the journal's first 4: entries were rewritten") {
		t.Fatalf("export --witnessed of a rewritten journal: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := w.h.run("receipts", "export", "--in-toto", "--proofs", "--out", fresh); code != 0 {
		t.Fatalf("export --proofs of a rewritten journal: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := w.h.run("receipts", "verify-export", fresh, "--pub", pub); code != 0 {
		t.Fatalf("the rewritten journal's export, with no quorum asked for: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := w.h.run("receipts", "verify-export", fresh, "--pub", pub, "--trust", trust, "--witnesses", "1"); code != 77 || !strings.Contains(stdout+stderr, "cosigned by none") {
		t.Fatalf("the rewritten journal's export at a gate asking for a witness: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := os.WriteFile(c.JournalPath(), kept, 0o600); err != nil {
		t.Fatal(err)
	}

	// The journal cut back to its first two receipts, as a restore from
	// an old backup would: the real witness holds 4, so the next
	// checkpoint is refused as ahead, and doctor raises the alarm.
	journal, err := os.ReadFile(c.JournalPath())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(journal), "\n")
	if err := os.WriteFile(c.JournalPath(), []byte(strings.Join(lines[:2], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := w.h.run("receipts", "checkpoint", "--witness"); code != 0 || !strings.Contains(stderr, "larger tree of this log than the journal") {
		t.Fatalf("checkpoint --witness of a cut journal: exit %d\n%s%s", code, stdout, stderr)
	}
	if says := doctorSays(); !strings.Contains(says["witness-ahead"], "critical: witness omni.test holds a tree of 4 entries") {
		t.Fatalf("doctor on a journal cut under a witness: %v", says)
	}
}

// syncWriter is a writer two goroutines may share.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
