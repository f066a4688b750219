package tlogwitness_test

import (
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/pkg/tlogwitness"
)

// FuzzVerifyCosignature: whatever a witness answers, VerifyCosignature
// does not panic, and what it keeps is one signature line that verifies
// with the witness's key over the checkpoint sent.
func FuzzVerifyCosignature(f *testing.F) {
	l := newLog(f, 3)
	cp := l.note(f, 3)
	fake := newFakeNoServer(f, l, "fuzz.example")
	signed, err := note.Sign(&note.Note{Text: strings.SplitN(string(cp), "\n\n", 2)[0] + "\n"}, fake.signer)
	if err != nil {
		f.Fatal(err)
	}
	_, good, _ := strings.Cut(string(signed), "\n\n")
	f.Add([]byte(good))
	f.Add([]byte("— fuzz.example AAAA\n"))
	f.Add([]byte(good + "— other.example AAAAAAAA\n"))
	f.Add([]byte("409\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, answer []byte) {
		line, err := tlogwitness.VerifyCosignature(fake.witness, cp, answer)
		if err != nil {
			return
		}
		if strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, "— fuzz.example ") {
			t.Fatalf("kept %q", line)
		}
		if _, err := note.Open(append(append([]byte(nil), cp...), line...), note.VerifierList(fake.witness.Verifier)); err != nil {
			t.Fatalf("kept %q, which does not verify: %v", line, err)
		}
	})
}
