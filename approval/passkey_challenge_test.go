package approval_test

import (
	"bytes"
	"encoding/hex"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
)

var challengeBase = approval.PasskeyStatement{
	Fingerprint: "sha256:" + string(bytes.Repeat([]byte("ab"), 32)),
	Decision:    approval.Approve,
	Expires:     time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC),
	Nonce:       []byte("nonce-0123456789"),
	Record:      string(bytes.Repeat([]byte("cd"), 32)),
}

// TestPasskeyChallenge pins the encoding (a vector another implementation
// can check) and that each field is part of it.
func TestPasskeyChallenge(t *testing.T) {
	base := approval.PasskeyChallenge(challengeBase)
	if got, want := hex.EncodeToString(base[:]), passkeyChallengeVector; got != want {
		t.Fatalf("challenge of the base statement = %s, want %s (the encoding changed: that is a new version of the domain)", got, want)
	}
	for _, tc := range []struct {
		name string
		edit func(*approval.PasskeyStatement)
	}{
		{"another fingerprint", func(s *approval.PasskeyStatement) { s.Fingerprint = "sha256:" + string(bytes.Repeat([]byte("ef"), 32)) }},
		{"deny instead of approve", func(s *approval.PasskeyStatement) { s.Decision = approval.Deny }},
		{"another expiry", func(s *approval.PasskeyStatement) { s.Expires = s.Expires.Add(time.Nanosecond) }},
		{"another nonce", func(s *approval.PasskeyStatement) { s.Nonce = []byte("nonce-0123456788") }},
		{"no nonce", func(s *approval.PasskeyStatement) { s.Nonce = nil }},
		{"another record", func(s *approval.PasskeyStatement) { s.Record = "" }},
		{"bytes moved from decision to expiry's neighbour", func(s *approval.PasskeyStatement) {
			s.Decision, s.Nonce = "approv", append([]byte("e"), s.Nonce...)
		}},
		{"bytes moved from fingerprint to decision", func(s *approval.PasskeyStatement) {
			s.Fingerprint, s.Decision = s.Fingerprint[:len(s.Fingerprint)-1], s.Fingerprint[len(s.Fingerprint)-1:]+s.Decision
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := challengeBase
			s.Nonce = append([]byte(nil), challengeBase.Nonce...)
			tc.edit(&s)
			if approval.PasskeyChallenge(s) == base {
				t.Fatalf("%s gives the same challenge", tc.name)
			}
		})
	}
	t.Run("the same instant in another zone", func(t *testing.T) {
		s := challengeBase
		s.Expires = s.Expires.In(time.FixedZone("x", 3600))
		if approval.PasskeyChallenge(s) != base {
			t.Fatal("the expiry's zone changed the challenge; only the instant should count")
		}
	})
}

const passkeyChallengeVector = "2fc71e831e3fa8eb44db44963ee748e15ae0ea7555897485b9e0d48652177fca"

// TestPasskeyChallengeFieldsProp: any change of any one field, or of
// several, changes the challenge (the encoding is injective); the same
// fields give the same challenge.
func TestPasskeyChallengeFieldsProp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		str := rapid.StringOfN(rapid.SampledFrom([]rune("ab\x00\xff")), 0, 6, -1)
		a := approval.PasskeyStatement{
			Fingerprint: str.Draw(t, "fp"),
			Decision:    rapid.SampledFrom([]string{approval.Approve, approval.Deny, ""}).Draw(t, "decision"),
			Expires:     time.Unix(rapid.Int64Range(0, 1<<34).Draw(t, "s"), rapid.Int64Range(0, 999999999).Draw(t, "ns")),
			Nonce:       rapid.SliceOfN(rapid.SampledFrom([]byte("ab\x00")), 0, 6).Draw(t, "nonce"),
			Record:      str.Draw(t, "record"),
		}
		b := a
		b.Nonce = append([]byte(nil), a.Nonce...)
		for _, f := range rapid.SliceOfNDistinct(rapid.IntRange(0, 4), 0, 5, rapid.ID[int]).Draw(t, "changed") {
			switch f {
			case 0:
				b.Fingerprint = str.Draw(t, "fp2")
			case 1:
				b.Decision = rapid.SampledFrom([]string{approval.Approve, approval.Deny, "", "approvee"}).Draw(t, "decision2")
			case 2:
				b.Expires = b.Expires.Add(time.Duration(rapid.Int64Range(-5, 5).Draw(t, "shift")))
			case 3:
				b.Nonce = rapid.SliceOfN(rapid.SampledFrom([]byte("ab\x00")), 0, 6).Draw(t, "nonce2")
			case 4:
				b.Record = str.Draw(t, "record2")
			}
		}
		same := a.Fingerprint == b.Fingerprint && a.Decision == b.Decision && a.Expires.Equal(b.Expires) &&
			bytes.Equal(a.Nonce, b.Nonce) && a.Record == b.Record
		if same != (approval.PasskeyChallenge(a) == approval.PasskeyChallenge(b)) {
			t.Fatalf("statements %+v and %+v: equal fields %v, equal challenges %v", a, b, same, !same)
		}
	})
}

var challengeBaseV2 = func() approval.PasskeyStatement {
	s := challengeBase
	s.Version, s.Issued = 2, time.Date(2031, 5, 6, 6, 8, 9, 0, time.UTC)
	return s
}()

// TestPasskeyChallengeV2 pins the version 2 encoding and that the issued
// time, and every other field, is part of it; version 1 stays as pinned
// above whatever Issued holds.
func TestPasskeyChallengeV2(t *testing.T) {
	base := approval.PasskeyChallenge(challengeBaseV2)
	if got, want := hex.EncodeToString(base[:]), passkeyChallengeVectorV2; got != want {
		t.Fatalf("v2 challenge of the base statement = %s, want %s (the encoding changed: that is a new version of the domain)", got, want)
	}
	if v1 := approval.PasskeyChallenge(challengeBase); v1 == base {
		t.Fatal("v1 and v2 statements of the same fields give the same challenge")
	}
	for _, tc := range []struct {
		name string
		edit func(*approval.PasskeyStatement)
	}{
		{"another issued time", func(s *approval.PasskeyStatement) { s.Issued = s.Issued.Add(time.Nanosecond) }},
		{"no issued time", func(s *approval.PasskeyStatement) { s.Issued = time.Time{} }},
		{"issued and expiry swapped", func(s *approval.PasskeyStatement) { s.Issued, s.Expires = s.Expires, s.Issued }},
		{"another fingerprint", func(s *approval.PasskeyStatement) { s.Fingerprint = "sha256:" + string(bytes.Repeat([]byte("ef"), 32)) }},
		{"deny instead of approve", func(s *approval.PasskeyStatement) { s.Decision = approval.Deny }},
		{"another expiry", func(s *approval.PasskeyStatement) { s.Expires = s.Expires.Add(time.Nanosecond) }},
		{"another nonce", func(s *approval.PasskeyStatement) { s.Nonce = []byte("nonce-0123456788") }},
		{"another record", func(s *approval.PasskeyStatement) { s.Record = "" }},
		{"version 1", func(s *approval.PasskeyStatement) { s.Version = 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := challengeBaseV2
			s.Nonce = append([]byte(nil), challengeBaseV2.Nonce...)
			tc.edit(&s)
			if approval.PasskeyChallenge(s) == base {
				t.Fatalf("%s gives the same challenge", tc.name)
			}
		})
	}
	t.Run("version 1 ignores Issued", func(t *testing.T) {
		s := challengeBase
		s.Issued = challengeBaseV2.Issued
		if got := approval.PasskeyChallenge(s); hex.EncodeToString(got[:]) != passkeyChallengeVector {
			t.Fatal("a version 1 statement's challenge changed with Issued")
		}
	})
	t.Run("the same instants in another zone", func(t *testing.T) {
		s := challengeBaseV2
		z := time.FixedZone("x", 3600)
		s.Expires, s.Issued = s.Expires.In(z), s.Issued.In(z)
		if approval.PasskeyChallenge(s) != base {
			t.Fatal("the zone changed the v2 challenge; only the instants should count")
		}
	})
}

// passkeyChallengeVectorV2 is also what a few lines of Python give (sha256
// over each field prefixed by its length as 8 big-endian bytes).
const passkeyChallengeVectorV2 = "f986fa96bbd34bb5b5f815837daa8ade74623538bf9ba393d59a3268e97f88e4"

// TestPasskeyChallengeV2FieldsProp: for version 2, any change of any one
// field or several, the issued time included, changes the challenge;
// the same fields give the same challenge.
func TestPasskeyChallengeV2FieldsProp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		str := rapid.StringOfN(rapid.SampledFrom([]rune("ab\x00\xff")), 0, 6, -1)
		instant := func(name string) time.Time {
			return time.Unix(rapid.Int64Range(0, 1<<34).Draw(t, name+"s"), rapid.Int64Range(0, 999999999).Draw(t, name+"ns"))
		}
		a := approval.PasskeyStatement{
			Version:     2,
			Fingerprint: str.Draw(t, "fp"),
			Decision:    rapid.SampledFrom([]string{approval.Approve, approval.Deny, ""}).Draw(t, "decision"),
			Expires:     instant("expires"),
			Issued:      instant("issued"),
			Nonce:       rapid.SliceOfN(rapid.SampledFrom([]byte("ab\x00")), 0, 6).Draw(t, "nonce"),
			Record:      str.Draw(t, "record"),
		}
		b := a
		b.Nonce = append([]byte(nil), a.Nonce...)
		for _, f := range rapid.SliceOfNDistinct(rapid.IntRange(0, 5), 0, 6, rapid.ID[int]).Draw(t, "changed") {
			switch f {
			case 0:
				b.Fingerprint = str.Draw(t, "fp2")
			case 1:
				b.Decision = rapid.SampledFrom([]string{approval.Approve, approval.Deny, "", "approvee"}).Draw(t, "decision2")
			case 2:
				b.Expires = b.Expires.Add(time.Duration(rapid.Int64Range(-5, 5).Draw(t, "shift")))
			case 3:
				b.Nonce = rapid.SliceOfN(rapid.SampledFrom([]byte("ab\x00")), 0, 6).Draw(t, "nonce2")
			case 4:
				b.Record = str.Draw(t, "record2")
			case 5:
				if rapid.Bool().Draw(t, "swap") {
					b.Issued, b.Expires = b.Expires, b.Issued
				} else {
					b.Issued = b.Issued.Add(time.Duration(rapid.Int64Range(-5, 5).Draw(t, "ishift")))
				}
			}
		}
		same := a.Fingerprint == b.Fingerprint && a.Decision == b.Decision && a.Expires.Equal(b.Expires) && a.Issued.Equal(b.Issued) &&
			bytes.Equal(a.Nonce, b.Nonce) && a.Record == b.Record
		if same != (approval.PasskeyChallenge(a) == approval.PasskeyChallenge(b)) {
			t.Fatalf("statements %+v and %+v: equal fields %v, equal challenges %v", a, b, same, !same)
		}
	})
}
