package approval

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// PasskeyDomain opens every passkey statement: an assertion made for
// prod-write's approval page can never be taken for a signature of anything
// else, nor one made elsewhere for an approval (docs/adr/0043-passkey-assertions-as-evidence.md).
// It is the domain of version 1 statements, which do not bind issued;
// PasskeyDomainV2 is the current one.
const PasskeyDomain = "prod-write passkey approval v1"

// PasskeyDomainV2 opens a version 2 statement, which also binds the
// record's issued time: a service holding its key can no longer post-date
// an approval past a lapsed veto (ADR 0043).
const PasskeyDomainV2 = "prod-write passkey approval v2"

// PasskeyStatement is what an approver's passkey signs, through the
// WebAuthn challenge: this decision, of this plan, answering this
// certainty record, until this expiry, for this one request of the
// service (the nonce).
type PasskeyStatement struct {
	Fingerprint string
	// Decision is Approve or Deny.
	Decision string
	Expires  time.Time
	// Nonce is the service's, fresh for each page request.
	Nonce []byte
	// Record is the ID of the certainty record the decision answers.
	Record string
	// Version is the statement's version: 2 binds Issued too; 0 or 1
	// is version 1, which does not.
	Version int
	// Issued is the decision record's issued time (version 2 only).
	Issued time.Time
}

// PasskeyChallenge is the WebAuthn challenge for s: sha256 over the domain
// and each field, every one length-prefixed (8 bytes, big-endian), so that
// no two statements encode alike however their bytes are split between
// fields. The expiry is its UTC RFC 3339 form with nanoseconds, so that the
// instant, not the zone it was written in, is what is signed. Version 2
// opens with [PasskeyDomainV2] and has the issued time, in the same form,
// right after the expiry; version 1 is unchanged.
func PasskeyChallenge(s PasskeyStatement) [32]byte {
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	v2 := s.Version == 2
	if v2 {
		field([]byte(PasskeyDomainV2))
	} else {
		field([]byte(PasskeyDomain))
	}
	field([]byte(s.Fingerprint))
	field([]byte(s.Decision))
	field([]byte(s.Expires.UTC().Format(time.RFC3339Nano)))
	if v2 {
		field([]byte(s.Issued.UTC().Format(time.RFC3339Nano)))
	}
	field(s.Nonce)
	field([]byte(s.Record))
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}
