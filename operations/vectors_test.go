package operations_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/operations"
)

// vector is one entry of testdata/vectors/fingerprint.json.
type vector struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	SameAs      string          `json:"same_as"`
	Bound       json.RawMessage `json:"bound"`
	Encoding    string          `json:"encoding"` // hex of the canonical encoding
	Fingerprint string          `json:"fingerprint"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	b, err := os.ReadFile("../testdata/vectors/fingerprint.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 10 {
		t.Fatalf("only %d vectors", len(vs))
	}
	return vs
}

// TestFingerprintVectors checks operations.Fingerprint against every vector.
func TestFingerprintVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			var b operations.Bound
			dec := json.NewDecoder(bytes.NewReader(v.Bound))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&b); err != nil {
				t.Fatal(err)
			}
			if got := operations.Fingerprint(&b); got != v.Fingerprint {
				t.Errorf("Fingerprint = %s, vector says %s", got, v.Fingerprint)
			}
		})
	}
}

// TestFingerprintVectorsIndependently re-implements the encoding of
// docs/FORMAT.md from the document, with its own JSON decoding, and checks
// every vector's encoding and fingerprint with it, so the vectors do not
// merely repeat what operations.Fingerprint computed when they were made.
func TestFingerprintVectorsIndependently(t *testing.T) {
	vs := loadVectors(t)
	byName := map[string]vector{}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			enc := referenceEncoding(t, v.Bound)
			if got := hex.EncodeToString(enc); got != v.Encoding {
				t.Errorf("encoding differs from the vector's:\n got %s\nwant %s", got, v.Encoding)
			}
			sum := sha256.Sum256(enc)
			if got := "sha256:" + hex.EncodeToString(sum[:]); got != v.Fingerprint {
				t.Errorf("fingerprint %s, vector says %s", got, v.Fingerprint)
			}
		})
		if _, dup := byName[v.Name]; dup {
			t.Errorf("two vectors named %s", v.Name)
		}
		byName[v.Name] = v
	}
	// What the vectors claim about each other holds, and no two vectors
	// share a fingerprint unless they say so.
	seen := map[string]string{}
	for _, v := range vs {
		if v.SameAs != "" {
			other, ok := byName[v.SameAs]
			if !ok || other.Fingerprint != v.Fingerprint {
				t.Errorf("%s claims the fingerprint of %s, which differs or is absent", v.Name, v.SameAs)
			}
			continue
		}
		if prev, ok := seen[v.Fingerprint]; ok {
			t.Errorf("%s and %s share fingerprint %s", prev, v.Name, v.Fingerprint)
		}
		seen[v.Fingerprint] = v.Name
	}
}

// TestWorkedExampleByHand checks the worked example against bytes written
// out field by field, the way docs/FORMAT.md lays them out.
func TestWorkedExampleByHand(t *testing.T) {
	var v vector
	for _, x := range loadVectors(t) {
		if x.Name == "worked-example" {
			v = x
		}
	}
	if v.Name == "" {
		t.Fatal("no worked-example vector")
	}
	u64 := func(n int) string { return hex.EncodeToString(binary.BigEndian.AppendUint64(nil, uint64(n))) }
	s := func(x string) string { return u64(len(x)) + hex.EncodeToString([]byte(x)) }
	a, b := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	g := "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
	want := s("prod-write/fingerprint/v1") +
		s("hello") + s(a) + // operation, operation digest
		u64(4) + s("/usr/bin/echo") + s("hello") + s("world") + s("{file.greeting}") + // argv
		s(b) + s("/srv") + s("staging") + // program digest, cwd, target
		u64(1) + s("who") + s("world") + // params
		u64(3) + s("REGION") + s("value") + s("eu-west-1") + // env, sorted by name
		s("TOKEN") + s("secret") + s("") +
		s("TZ") + s("unset") + s("") +
		u64(1) + s("greeting") + s("6") + s(g) // files
	if v.Encoding != want {
		t.Fatalf("worked-example encoding\n got %s\nwant %s", v.Encoding, want)
	}
	raw, _ := hex.DecodeString(want)
	sum := sha256.Sum256(raw)
	if fp := "sha256:" + hex.EncodeToString(sum[:]); fp != v.Fingerprint {
		t.Fatalf("worked-example fingerprint %s, vector says %s", fp, v.Fingerprint)
	}
	// docs/FORMAT.md shows the same example; it must not drift.
	doc, err := os.ReadFile("../docs/FORMAT.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), v.Fingerprint) {
		t.Errorf("docs/FORMAT.md does not show the worked example's fingerprint %s", v.Fingerprint)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(doc)), ""), want) {
		t.Errorf("docs/FORMAT.md does not show the worked example's encoding")
	}
}

// referenceEncoding is the canonical encoding of docs/FORMAT.md, written
// from the document: decode the bound JSON into plain maps, then append
// each field as a u64 big-endian length or count followed by its bytes.
func referenceEncoding(t *testing.T, bound json.RawMessage) []byte {
	t.Helper()
	var in struct {
		Operation       string            `json:"operation"`
		OperationDigest string            `json:"operation_digest"`
		Target          string            `json:"target"`
		Params          map[string]string `json:"params"`
		Argv            []string          `json:"argv"`
		ProgramSHA256   string            `json:"program_sha256"`
		Cwd             string            `json:"cwd"`
		Env             []map[string]string
		Files           []map[string]any
		Precondition    *struct {
			Check            string `json:"check"`
			CheckFingerprint string `json:"check_fingerprint"`
			OutputSHA256     string `json:"output_sha256"`
		} `json:"precondition"`
		Interpreter *struct {
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
		} `json:"interpreter"`
	}
	if err := json.Unmarshal(bound, &in); err != nil {
		t.Fatal(err)
	}
	var out []byte
	str := func(s string) {
		out = binary.BigEndian.AppendUint64(out, uint64(len(s)))
		out = append(out, s...)
	}
	count := func(n int) { out = binary.BigEndian.AppendUint64(out, uint64(n)) }

	str("prod-write/fingerprint/v1")
	str(in.Operation)
	str(in.OperationDigest)
	count(len(in.Argv))
	for _, a := range in.Argv {
		str(a)
	}
	str(in.ProgramSHA256)
	str(in.Cwd)
	str(in.Target)

	names := make([]string, 0, len(in.Params))
	for k := range in.Params {
		names = append(names, k)
	}
	slices.Sort(names) // Go strings compare bytewise
	count(len(names))
	for _, k := range names {
		str(k)
		str(in.Params[k])
	}

	env := slices.Clone(in.Env)
	slices.SortStableFunc(env, func(a, b map[string]string) int { return strings.Compare(a["name"], b["name"]) })
	count(len(env))
	for _, e := range env {
		str(e["name"])
		str(e["kind"])
		if e["kind"] == "value" {
			str(e["value"])
		} else {
			str("")
		}
	}

	files := slices.Clone(in.Files)
	slices.SortStableFunc(files, func(a, b map[string]any) int { return strings.Compare(a["name"].(string), b["name"].(string)) })
	count(len(files))
	for _, f := range files {
		str(f["name"].(string))
		// Size is written in decimal; json.Number keeps large sizes exact.
		size, err := strconv.ParseInt(jsonNumber(t, f["size"]), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		str(strconv.FormatInt(size, 10))
		str(f["sha256"].(string))
	}
	// Field 11, only when present (docs/FORMAT.md §1.2).
	if pc := in.Precondition; pc != nil {
		str("precondition")
		str(pc.Check)
		str(pc.CheckFingerprint)
		str(pc.OutputSHA256)
	}
	// Field 12, only for a script.
	if ip := in.Interpreter; ip != nil {
		str("interpreter")
		str(ip.Path)
		str(ip.SHA256)
	}
	return out
}

// TestPreconditionVectorExtendsItsBase checks that binding a precondition
// only appends field 11: the precondition vector's encoding starts with its
// base's whole encoding, and the base's fingerprint is unchanged by the
// field's existence (it is absent there).
func TestPreconditionVectorExtendsItsBase(t *testing.T) {
	byName := map[string]vector{}
	for _, v := range loadVectors(t) {
		byName[v.Name] = v
	}
	pre, base := byName["precondition"], byName["config-push"]
	if pre.Name == "" || base.Name == "" {
		t.Fatal("no precondition or config-push vector")
	}
	if !strings.HasPrefix(pre.Encoding, base.Encoding) || len(pre.Encoding) == len(base.Encoding) {
		t.Errorf("the precondition vector's encoding does not extend config-push's")
	}
	var b operations.Bound
	if err := json.Unmarshal(pre.Bound, &b); err != nil {
		t.Fatal(err)
	}
	if b.Precondition == nil {
		t.Fatal("the precondition vector binds no precondition")
	}
	b.Precondition = nil
	if got := operations.Fingerprint(&b); got != base.Fingerprint {
		t.Errorf("without its precondition the vector gives %s, not config-push's %s", got, base.Fingerprint)
	}
}

func jsonNumber(t *testing.T, v any) string {
	t.Helper()
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("size %v is not a number", v)
	}
	if f != float64(int64(f)) || f > 1<<53 {
		t.Fatalf("size %v is not an integer a float64 holds exactly", v)
	}
	return strconv.FormatInt(int64(f), 10)
}
