package receipts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// FuzzReplay: the journal parser and replay never panic on any input, and
// an entry reported OK is a real receipt signed by the runner.
func FuzzReplay(f *testing.F) {
	runner := keys.FromSeed(bytes.Repeat([]byte{9}, 32))
	policy, err := approval.ParsePolicy("trust.toml", []byte("[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = \""+runner.Public().String()+"\"\n"))
	if err != nil {
		f.Fatal(err)
	}
	sign := func(r *receipts.Receipt) string {
		env, _ := approval.Sign(runner, receipts.PayloadType, r)
		b, _ := jsonMarshal(env)
		return string(b)
	}
	rep := sign(&receipts.Receipt{Kind: receipts.KindRepair, Seq: 1, Runner: "runner", Repair: &receipts.Repair{Dropped: 3}})
	f.Add(rep + "\n")
	f.Add(rep + "\n" + rep + "\n")
	f.Add("not json\n{}\n")
	f.Add(`{"payloadType":"application/vnd.prod-write.receipt+json","payload":"e30=","signatures":[{"keyid":"k","sig":"AA=="}]}` + "\n")
	f.Fuzz(func(t *testing.T, data string) {
		rp := &receipts.Replayer{Policy: policy, Workers: 2}
		_, err := rp.Replay(bytes.NewReader([]byte(data)), func(r receipts.Result) {
			if r.OK && r.Runner != "runner" {
				t.Fatalf("entry %d is OK but names runner %q", r.Line, r.Runner)
			}
		})
		var nr *receipts.NotReceiptsError
		if err != nil && !errors.As(err, &nr) {
			t.Fatalf("Replay: %v", err)
		}
	})
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// FuzzParseVersions: history/versions.toml is read strictly and never
// panics; what it accepts, written back by Format, reads the same.
func FuzzParseVersions(f *testing.F) {
	f.Add([]byte("[[trust]]\ndigest = \"sha256:" + strings.Repeat("a", 64) + "\"\nsince = 2025-01-01T00:00:00Z\nuntil = 2025-02-01T00:00:00Z\n"))
	f.Add([]byte("[[operation]]\nname = \"noop\"\ndigest = \"sha256:" + strings.Repeat("0", 64) + "\"\nsince = 2025-01-01T00:00:00Z\n"))
	f.Add([]byte("[[trust]]\ndigest = \"sha256:AA\"\n"))
	f.Add([]byte("[[operation]]\ndigest = \"sha256:" + strings.Repeat("0", 64) + "\"\n"))
	f.Add([]byte("[[trust]]\ndigest = \"sha256:" + strings.Repeat("a", 64) + "\"\nsince = 2025-03-01T00:00:00Z\nuntil = 2025-02-01T00:00:00Z\n"))
	f.Add([]byte("x = 1\n"))
	f.Add([]byte("recorded = 2025-02-01T00:00:00Z\n\n[[trust]]\ndigest = \"sha256:" + strings.Repeat("b", 64) + "\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := receipts.ParseVersions("versions.toml", data)
		if err != nil {
			return
		}
		again, err := receipts.ParseVersions("versions.toml", v.Format())
		if err != nil {
			t.Fatalf("Format wrote what Parse refuses: %v\n%s", err, v.Format())
		}
		if !bytes.Equal(again.Format(), v.Format()) {
			t.Fatalf("not stable:\n%s\n%s", v.Format(), again.Format())
		}
	})
}
