package doctor

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/tlogwitness"
)

// What the service keeps of its witnesses, judged: a witness ahead of the
// journal is the critical alarm of a cut or a rewrite, a failing one a
// warning, one the policy has no key for a warning, one never sent to a
// note, and a state file that does not decode is reported.
func TestWitnessFindings(t *testing.T) {
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n", k.Public().String())
	for _, name := range []string{"alpha.example", "beta.example"} {
		_, vkey, err := note.GenerateKey(rand.Reader, name)
		if err != nil {
			t.Fatal(err)
		}
		cosig, err := fnote.VKeyToCosignatureV1(vkey)
		if err != nil {
			t.Fatal(err)
		}
		text += fmt.Sprintf("\n[[witness]]\nkey = %q\n", cosig)
	}
	policy, err := approval.ParsePolicy("trust.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	ahead := tlogwitness.State{Size: 9, Tried: time.Unix(1e9, 0), Ahead: true, Error: "witness alpha.example: it holds 9 entries, the checkpoint 4"}
	// As a service before State.Ahead kept it: the error's text alone.
	aheadText := tlogwitness.State{Size: 9, Tried: time.Unix(1e9, 0), Error: fmt.Errorf("witness alpha.example: %w (it holds 9 entries, the checkpoint 4)", tlogwitness.ErrAhead).Error()}
	down := tlogwitness.State{Size: 4, Tried: time.Unix(1e9, 0), Error: "witness beta.example: connection refused"}
	fine := tlogwitness.State{Size: 4, Cosignature: "— alpha.example x\n"}
	for _, tc := range []struct {
		name      string
		witnesses []string
		states    map[string]tlogwitness.State // nil: no file
		raw       string                       // the file's bytes instead
		want      []string                     // severity/check of each finding, in order
	}{
		{"no witness configured", nil, map[string]tlogwitness.State{"alpha.example": ahead}, "", nil},
		{"each cosigned", []string{"alpha.example", "beta.example"}, map[string]tlogwitness.State{"alpha.example": fine, "beta.example": fine}, "", nil},
		{"a witness ahead of the journal", []string{"alpha.example"}, map[string]tlogwitness.State{"alpha.example": ahead}, "", []string{"critical/witness-ahead"}},
		{"a witness ahead, as an earlier version kept it", []string{"alpha.example"}, map[string]tlogwitness.State{"alpha.example": aheadText}, "", []string{"critical/witness-ahead"}},
		{"a witness failing", []string{"alpha.example", "beta.example"}, map[string]tlogwitness.State{"alpha.example": fine, "beta.example": down}, "", []string{"warning/witness-failing"}},
		{"a witness with no key", []string{"gamma.example"}, map[string]tlogwitness.State{}, "", []string{"warning/witness-unkeyed"}},
		{"never sent to", []string{"beta.example"}, nil, "", []string{"info/witness-unsent"}},
		{"a state that does not decode", []string{"alpha.example"}, nil, "{\"alpha.example\": 7", []string{"warning/witness-state"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &config.Config{State: t.TempDir(), Path: "prod-write.toml"}
			for _, w := range tc.witnesses {
				c.Witnesses = append(c.Witnesses, config.Witness{Name: w, URL: "https://" + w})
			}
			store := tlogwitness.StoreIn(c.State)
			switch {
			case tc.raw != "":
				if err := os.WriteFile(filepath.Join(c.State, "witnesses.json"), []byte(tc.raw), 0o600); err != nil {
					t.Fatal(err)
				}
			case tc.states != nil:
				if err := store.Save(tc.states); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for _, f := range witnessFindings(c, policy) {
				got = append(got, f.Severity+"/"+f.Check)
				if f.Check == "witness-ahead" && !strings.Contains(f.Message, "9 entries") {
					t.Errorf("the alarm does not say how many entries the witness holds: %s", f.Message)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("findings %v, want %v", got, tc.want)
			}
		})
	}
}
