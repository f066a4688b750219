package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// replay --checkpoint reads the bare envelope and the --json document, each
// strictly: a document with a key twice, or in another case, or with bytes
// after it, is refused, so what a checker in another language reads is
// what replay reads.
func TestDecodeCheckpointStrict(t *testing.T) {
	env := `{"payloadType":"` + receipts.CheckpointType + `","payload":"e30=","signatures":[{"keyid":"k","sig":"c2ln"}]}`
	doc := `{"format_version":1,"count":2,"head":"h","time":"2026-12-01T00:00:00Z","runner":"runner","envelope":` + env + `}`
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"bare envelope", env, true},
		{"document", doc, true},
		{"document, envelope twice", strings.Replace(doc, `"envelope":`, `"envelope":`+env+`,"envelope":`, 1), false},
		{"document, a key in another case", strings.Replace(doc, `"count"`, `"COUNT"`, 1), false},
		{"document, an unknown key", strings.Replace(doc, `"count"`, `"counted"`, 1), false},
		{"document without its envelope", `{"format_version":1,"count":2}`, false},
		{"document, bytes after it", doc + "x", false},
	} {
		got, err := localapi.DecodeCheckpoint([]byte(tc.in))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
			continue
		}
		if tc.ok && (got == nil || got.PayloadType != receipts.CheckpointType) {
			t.Errorf("%s: envelope %+v", tc.name, got)
		}
	}
}

// A checkpoint taken while the journal ends in a torn line (a crash's) names
// the last complete line: the next append cuts the torn one, and the
// checkpoint still verifies.
func TestCheckpointSkipsATornTail(t *testing.T) {
	h := newRunHarness(t)
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "test.toml"), []byte(inProcessOps), 0o644); err != nil {
		t.Fatal(err)
	}
	fp := h.plan("fail")
	if code, _, stderr := h.run("gera", "go", fp, "--key", h.key("gera"), "--uses", "2"); code != 0 {
		t.Fatal(stderr)
	}
	h.run("run", fp)
	journal := filepath.Join(h.dir, "state", "journal", "receipts.jsonl")
	f, err := os.OpenFile(journal, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"payloadType":"torn`)
	f.Close()
	cp := filepath.Join(h.dir, "head.json")
	if code, _, stderr := h.run("receipts", "checkpoint", "--out", cp); code != 0 {
		t.Fatal(stderr)
	}
	h.run("run", fp) // cuts the torn line, appends two receipts
	if code, stdout, stderr := h.run("replay", "--checkpoint", cp); code != 0 {
		t.Fatalf("replay with a checkpoint taken over a torn tail: %d\n%s%s", code, stdout, stderr)
	}
}
