package cli

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/pkg/api"
)

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
	head, err := localAPI{f: w.local}.ReceiptsCheckpoint(context.Background(), api.ReceiptsCheckpointRequest{Note: true})
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
	} {
		code, stdout, stderr := w.h.run(append([]string{"replay"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("replay %v: exit %d; want %d with %q\n%s%s", tc.args, code, tc.code, tc.want, stdout, stderr)
		}
	}
}
