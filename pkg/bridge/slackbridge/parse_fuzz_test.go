package slackbridge

import (
	"strings"
	"testing"
)

// FuzzParseButtonValue: a button value round-trips exactly, and anything
// else is refused without panicking.
func FuzzParseButtonValue(f *testing.F) {
	fp, rec := "sha256:"+strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	for _, s := range []string{ButtonValue(fp, rec), fp, fp + " " + rec[:10], " " + rec, fp + "  " + rec, strings.ToUpper(ButtonValue(fp, rec))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		gotFP, gotRec, err := ParseButtonValue(v)
		if err != nil {
			return
		}
		if ButtonValue(gotFP, gotRec) != v {
			t.Fatalf("%q parsed as %q %q, which does not round-trip", v, gotFP, gotRec)
		}
	})
}

// FuzzParseActionTS: one action timestamp means one instant, so a
// retried click signs the same answer; the parser never panics.
func FuzzParseActionTS(f *testing.F) {
	for _, s := range []string{"1700000000.123456", "1.5", "0.000000001", ".1", "1.", "-1.2", "99999999999999.1", "1e3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := parseActionTS(s)
		if err != nil {
			return
		}
		again, err := parseActionTS(s)
		if err != nil || !again.Equal(ts) {
			t.Fatalf("%q parsed twice differently", s)
		}
		if ts.Before(ts.Truncate(0)) || ts.Unix() < 0 {
			t.Fatalf("%q parsed to %v", s, ts)
		}
	})
}
