// Package dsse holds the envelope every prod-write record is signed in:
// the Dead Simple Signing Envelope (github.com/secure-systems-lab/dsse),
// its JSON form and its pre-authentication encoding (PAE), which is what
// a signature covers.
//
// It is written here rather than imported from go-securesystemslib, whose
// dsse package links golang.org/x/crypto/ssh and with it crypto/x509: their
// initialisation cost every prod-write process about half a millisecond
// (docs/PERFORMANCE.md). A test holds both byte for byte equal.
package dsse

import (
	"context"
	"encoding/base64"
	"strconv"
)

// Envelope is a DSSE envelope: Payload is the standard base64 of the
// signed body.
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     string      `json:"payload"`
	Signatures  []Signature `json:"signatures"`
}

// Signature is one signature of an envelope: Sig is the standard base64 of
// the signature over [PAE] by the key KeyID names.
type Signature struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"`
}

// PAE is the pre-authentication encoding of payloadType and payload:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths in ASCII
// decimal.
func PAE(payloadType string, payload []byte) []byte {
	b := make([]byte, 0, len("DSSEv1 ")+2*20+len(payloadType)+3+len(payload))
	b = append(b, "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(payloadType)), 10)
	b = append(b, ' ')
	b = append(b, payloadType...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(payload)), 10)
	b = append(b, ' ')
	return append(b, payload...)
}

// Signer makes signatures over PAE bytes; a key implements it.
type Signer interface {
	Sign(ctx context.Context, data []byte) ([]byte, error)
	KeyID() (string, error)
}

// Sign wraps body in an envelope of payloadType signed by s.
func Sign(ctx context.Context, s Signer, payloadType string, body []byte) (*Envelope, error) {
	sig, err := s.Sign(ctx, PAE(payloadType, body))
	if err != nil {
		return nil, err
	}
	id, err := s.KeyID()
	if err != nil {
		return nil, err
	}
	return &Envelope{
		PayloadType: payloadType,
		Payload:     base64.StdEncoding.EncodeToString(body),
		Signatures:  []Signature{{KeyID: id, Sig: base64.StdEncoding.EncodeToString(sig)}},
	}, nil
}
