package bridge_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/dsse"
)

// What an approver is shown is read by the gate's own strict rules
// (pkg/strictjson, docs/adr/0029-one-decode-after-the-strict-check.md): a
// certainty record or an answer the gate refuses as unreadable is never
// shown as a record or an answer that says something, and the view says
// the gate is closed on unreadable evidence.
func TestDescribeDecodesAsTheGateDoes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// edit turns a well-formed payload into one strict decoding
		// refuses.
		edit func(payload string) string
	}{
		{"unknown field", func(p string) string { return strings.Replace(p, `{`, `{"comment":"x",`, 1) }},
		{"duplicate key", func(p string) string { return strings.Replace(p, `{`, `{"summary":"nothing to see",`, 1) }},
		{"case-variant key", func(p string) string { return strings.Replace(p, `{`, `{"SUMMARY":"nothing to see",`, 1) }},
		{"trailing value", func(p string) string { return p + `{}` }},
		{"invalid UTF-8", func(p string) string {
			return strings.Replace(p, `touch the ready flag`, "touch the ready \xff flag", 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := bridgetest.New(t, 1)
			now := time.Now().UTC()
			rec := approval.CertaintyRecord{Fingerprint: w.FP, Summary: "touch the ready flag", Effect: "a flag file appears",
				BlastRadius: "staging only", Rollback: "rm the flag", Certainty: "high", Filer: "smith",
				Issued: now.Add(-30 * time.Second), Expires: now.Add(time.Hour)}
			body, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			bad := []byte(tc.edit(string(body)))
			env, err := dsse.Sign(context.Background(), bridgetest.Key("smith"), approval.TypeSmith, bad)
			if err != nil {
				t.Fatal(err)
			}
			id := w.Put(t, env)
			ans := approval.Answer{Fingerprint: w.FP, Record: id, Answer: approval.Approve, Approver: "alice", Issued: now.Add(-time.Second), Expires: now.Add(time.Hour)}
			abody, err := json.Marshal(ans)
			if err != nil {
				t.Fatal(err)
			}
			aenv, err := dsse.Sign(context.Background(), bridgetest.Key("alice"), approval.TypeTrinity, []byte(strings.Replace(string(abody), `{`, `{"answer":"deny",`, 1)))
			if err != nil {
				t.Fatal(err)
			}
			w.Put(t, aenv)

			v, err := bridge.Describe(w.Source(), w.FP, id, now)
			if err != nil {
				t.Fatal(err)
			}
			if v.Record != nil {
				t.Errorf("a record the gate cannot read is shown as a record: %+v", v.Record)
			}
			if v.Gate != "evidence_unreadable" || !v.Closed() {
				t.Errorf("gate %q (closed %v), want evidence_unreadable", v.Gate, v.Closed())
			}
			if len(v.Answers) != 1 || !v.Answers[0].Unreadable || v.Answers[0].Valid {
				t.Errorf("an answer the gate cannot read is shown as %+v", v.Answers)
			}
			lines := bridge.RecordLines(v)
			text := strings.Join(append(lines, bridge.StatusLines(v)...), "\n")
			if strings.Contains(text, "nothing to see") || strings.Contains(text, "touch the ready") || !strings.Contains(lines[0], "unreadable") || !strings.Contains(text, "Unreadable answer") || !strings.Contains(text, "evidence_unreadable") {
				t.Errorf("what the approver reads:\n%s", text)
			}
		})
	}
}
