package githubbridge

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
)

// FuzzRefusalReplyTo: a comment body is the bridge's refusal reply to a
// command only when it carries the bridge's signature of that command; the
// bridge signed only comment 9001 and review 7 here, so no body, however
// made, is taken for the reply to any other command. And it never panics.
func FuzzRefusalReplyTo(f *testing.F) {
	w := bridgetest.New(f, 1)
	p := &Poller{Owner: "acme", Repo: "prod-decisions", Attestor: w.Attestor(f)}
	comment := fmt.Sprintf(refusalMarker, "comment", 9001, p.Attestor.Mark(p.refusalMark("comment", 9001)))
	review := fmt.Sprintf(refusalMarker, "review", 7, p.Attestor.Mark(p.refusalMark("review", 7)))
	for _, s := range []string{
		comment, review, "Not recorded: …\n\n" + comment + "\n", comment + review,
		strings.Replace(comment, "9001", "9002", 1), strings.Replace(review, "review", "comment", 1),
		"<!-- prod-write: refused comment 9001 -->", "<!-- prod-write: refused review 1 AAAA -->", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		k, ok := p.refusalReplyTo(body)
		if ok && k != (itemKey{id: 9001}) && k != (itemKey{review: true, id: 7}) {
			t.Fatalf("%q taken for the bridge's reply to %+v, which it never signed", body, k)
		}
	})
}
