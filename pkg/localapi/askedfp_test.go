package localapi

import (
	"regexp"
	"testing"

	"pgregory.net/rapid"
)

// askedFingerprintRE is the rule askedFingerprint checks by hand.
var askedFingerprintRE = regexp.MustCompile(`^(sha256:)?[0-9a-f]{1,64}$`)

func TestAskedFingerprint(t *testing.T) {
	hex64 := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"", false},
		{"sha256:", false},
		{"a", true},
		{"sha256:a", true},
		{hex64, true},
		{"sha256:" + hex64, true},
		{hex64 + "0", false},
		{"sha256:" + hex64 + "0", false},
		{"ABC", false},
		{"sha256:abc ", false},
		{"sha512:abc", false},
		{"sha256:sha256:abc", false},
		{"g", false},
		{"../../etc/passwd", false},
	} {
		if got := askedFingerprint(tc.in); got != tc.want {
			t.Errorf("askedFingerprint(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestAskedFingerprintMatchesRegexp: the hand-written check accepts
// exactly what the regexp it replaced accepts.
func TestAskedFingerprintMatchesRegexp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(
			rapid.StringMatching(`(sha256:)?[0-9a-fA-G:]{0,70}`),
			rapid.String(),
		).Draw(t, "s")
		if got, want := askedFingerprint(s), askedFingerprintRE.MatchString(s); got != want {
			t.Fatalf("askedFingerprint(%q) = %v, the regexp says %v", s, got, want)
		}
	})
}
