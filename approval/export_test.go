package approval

import (
	"crypto/sha256"
	"encoding/base64"

	"github.com/prod-write/prod-write/pkg/dsse"
)

// Remembered reports whether p's verification cache holds env's signature
// as verified, so that tests can tell what VerifyBatch accepted from what
// Open would check again.
func (p *Policy) Remembered(env *Envelope) bool {
	if p.cache == nil || len(env.Signatures) != 1 {
		return false
	}
	pr, ok := p.ByKey(env.Signatures[0].KeyID)
	if !ok {
		return false
	}
	body, err := base64.StdEncoding.Strict().DecodeString(env.Payload)
	if err != nil {
		return false
	}
	_, ok = p.cache.Load(cacheKey(sha256.Sum256(dsse.PAE(env.PayloadType, body)), pr.pub, env.Signatures[0].Sig))
	return ok
}
