package receipts_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// vectorExport is docs/FORMAT.md §4's expected export (which in-toto's own
// tools verify, TestInTotoVectors) and the runner key that signed it.
func vectorExport(t testing.TB) ([]byte, *keys.Private) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(intotoVectors, "expected.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return want, vectorKey(t)
}

// resign decodes line's statement, lets edit change it, and signs it again
// with k: a forgery only the key's holder could make, so what
// VerifyExportWitnessed must refuse in it is the content, not the
// signature.
func resign(t *testing.T, k *keys.Private, line []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var env dsse.Envelope
	if err := json.Unmarshal(line, &env); err != nil {
		t.Fatal(err)
	}
	body, _ := base64.StdEncoding.DecodeString(env.Payload)
	var st map[string]any
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	edit(st)
	b, _ := json.Marshal(st)
	e, err := dsse.Sign(context.Background(), k, env.PayloadType, b)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(e)
	return out
}

// TestVerifyExport: what export writes verifies under the runner's key,
// and each check refuses what it exists for (each case fails with its
// check removed).
func TestVerifyExport(t *testing.T) {
	export, k := vectorExport(t)
	lines := bytes.SplitAfter(export, []byte("\n"))
	lines = lines[:len(lines)-1]
	v, err := receipts.VerifyExportWitnessed(bytes.NewReader(export), k.Public(), receipts.WitnessQuorum{})
	if err != nil || v.Runs != len(lines) || v.Proved != 0 {
		t.Fatalf("the vectors' export: %+v, %v; want %d runs, none proved", v, err, len(lines))
	}
	if v, err := receipts.VerifyExportWitnessed(strings.NewReader(""), k.Public(), receipts.WitnessQuorum{}); v.Runs != 0 || err != nil {
		t.Errorf("an empty export: %+v, %v; want 0, nil", v, err)
	}
	other, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.TrimSuffix(lines[0], []byte("\n"))
	flipped := func() []byte {
		var env dsse.Envelope
		_ = json.Unmarshal(first, &env)
		body, _ := base64.StdEncoding.DecodeString(env.Payload)
		body[len(body)/2] ^= 1
		env.Payload = base64.StdEncoding.EncodeToString(body)
		b, _ := json.Marshal(env)
		return b
	}()
	for _, tc := range []struct {
		name      string
		export    []byte
		pub       keys.Public
		malformed bool
		want      string // in the error
	}{
		{name: "another key", export: export, pub: other.Public(), want: "signature does not verify"},
		{name: "a payload byte changed", export: append(flipped, '\n'), pub: k.Public(), want: "signature does not verify"},
		{name: "a line twice", export: append(bytes.Clone(export), lines[1]...), pub: k.Public(), want: "attested twice"},
		{name: "cut off", export: export[:len(export)-1], pub: k.Public(), malformed: true, want: "no newline"},
		{name: "not an envelope", export: []byte("[1]\n"), pub: k.Public(), malformed: true, want: "not a DSSE envelope"},
		{name: "an unknown field", export: append(append(bytes.Clone(first[:len(first)-1]), `,"x":1}`...), '\n'), pub: k.Public(), malformed: true, want: "not a DSSE envelope"},
		{name: "another predicate", pub: k.Public(), want: "predicateType",
			export: append(resign(t, k, first, func(st map[string]any) { st["predicateType"] = "https://slsa.dev/provenance/v1" }), '\n')},
		{name: "another statement type", pub: k.Public(), want: "_type",
			export: append(resign(t, k, first, func(st map[string]any) { st["_type"] = "https://in-toto.io/Statement/v0.1" }), '\n')},
		{name: "no subject", pub: k.Public(), want: "no subject",
			export: append(resign(t, k, first, func(st map[string]any) { st["subject"] = []any{} }), '\n')},
		{name: "a subject without sha256", pub: k.Public(), want: "sha256",
			export: append(resign(t, k, first, func(st map[string]any) {
				st["subject"] = []any{map[string]any{"name": "/bin/true", "digest": map[string]any{"sha1": "da39a3ee5e6b4b0d3255bfef95601890afd80709"}}}
			}), '\n')},
		{name: "no run id", pub: k.Public(), want: "run_id",
			export: append(resign(t, k, first, func(st map[string]any) { st["predicate"].(map[string]any)["run_id"] = "" }), '\n')},
		{name: "a predicate field unknown", pub: k.Public(), malformed: true, want: "not a run statement",
			export: append(resign(t, k, first, func(st map[string]any) { st["predicate"].(map[string]any)["approved"] = true }), '\n')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := receipts.VerifyExportWitnessed(bytes.NewReader(tc.export), tc.pub, receipts.WitnessQuorum{})
			var me *receipts.MalformedExportError
			var re *receipts.ExportRefusedError
			switch {
			case err == nil:
				t.Fatal("verified")
			case tc.malformed && !errors.As(err, &me):
				t.Fatalf("%v: want a MalformedExportError", err)
			case !tc.malformed && !errors.As(err, &re):
				t.Fatalf("%v: want an ExportRefusedError", err)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("%v: want it to say %q", err, tc.want)
			}
		})
	}
}

// FuzzVerifyExport: any bytes give a count and an error or none, never a
// panic, and nothing not signed by the key verifies.
func FuzzVerifyExport(f *testing.F) {
	export, k := vectorExport(f)
	f.Add(export)
	f.Add([]byte("{}\n"))
	f.Add([]byte(`{"mediaType":"` + receipts.RunBundleV1 + `","dsseEnvelope":` + string(bytes.SplitAfter(export, []byte("\n"))[0][:len(bytes.SplitAfter(export, []byte("\n"))[0])-1]) + `,"inclusion":[],"checkpoint":""}` + "\n"))
	f.Add([]byte(""))
	pub := k.Public()
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := receipts.VerifyExportWitnessed(bytes.NewReader(b), pub, receipts.WitnessQuorum{})
		if err != nil || v.Runs == 0 {
			return
		}
		n := v.Runs
		// What verified is, whatever its spacing, a payload the runner
		// signed.
		var env dsse.Envelope
		if err := json.Unmarshal(bytes.SplitAfter(b, []byte("\n"))[0], &env); err != nil {
			t.Fatalf("verified %d runs, but the first line is no envelope: %v", n, err)
		}
		if !bytes.Contains(export, []byte(`"payload":"`+env.Payload+`"`)) {
			t.Fatalf("verified %d runs of a payload the runner did not sign: %.200q", n, b)
		}
	})
}
