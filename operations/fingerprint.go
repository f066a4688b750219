package operations

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"sort"
	"strconv"
)

// FingerprintDomain opens every fingerprint encoding; it names the version.
// docs/FORMAT.md specifies the encoding and testdata/vectors checks it.
const FingerprintDomain = "prod-write/fingerprint/v1"

// Env kinds in the canonical encoding.
const (
	EnvValue  = "value"  // bound by name and value
	EnvSecret = "secret" // bound by name only; the value is never recorded
	EnvUnset  = "unset"  // a pass variable the caller did not set
)

// Fingerprint computes the canonical fingerprint of the bound inputs of p.
// It reads only p's fields, never the file system, so replay can recompute
// it from a receipt.
func Fingerprint(p *Bound) string {
	e := encoder{h: sha256.New()}
	e.str(FingerprintDomain)
	e.str(p.Operation)
	e.str(p.OperationDigest)
	e.strs(p.Argv)
	e.str(p.ProgramSHA256)
	e.str(p.Cwd)
	e.str(p.Target)

	names := make([]string, 0, len(p.Params))
	for k := range p.Params {
		names = append(names, k)
	}
	sort.Strings(names)
	e.count(len(names))
	for _, k := range names {
		e.str(k)
		e.str(p.Params[k])
	}

	env := append([]EnvVar(nil), p.Env...)
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	e.count(len(env))
	for _, v := range env {
		e.str(v.Name)
		e.str(v.Kind)
		if v.Kind == EnvValue {
			e.str(v.Value)
		} else {
			e.str("")
		}
	}

	files := append([]File(nil), p.Files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	e.count(len(files))
	for _, f := range files {
		e.str(f.Name)
		e.str(strconv.FormatInt(f.Size, 10))
		e.str(f.SHA256)
	}
	// Only when there is one, so every fingerprint made before
	// preconditions is unchanged (docs/FORMAT.md).
	if pc := p.Precondition; pc != nil {
		e.str("precondition")
		e.str(pc.Check)
		e.str(pc.CheckFingerprint)
		e.str(pc.OutputSHA256)
	}
	// Likewise only for a script: every other program's fingerprint is
	// what it was (docs/FORMAT.md, field 12).
	if ip := p.Interpreter; ip != nil {
		e.str("interpreter")
		e.str(ip.Path)
		e.str(ip.SHA256)
	}
	return "sha256:" + hex.EncodeToString(e.h.Sum(nil))
}

// encoder writes the canonical encoding: every string as its length (8
// bytes, big-endian) then its bytes; every list as its count (8 bytes,
// big-endian) then its items.
type encoder struct {
	h   hash.Hash
	buf [8]byte
}

func (e *encoder) count(n int) {
	binary.BigEndian.PutUint64(e.buf[:], uint64(n))
	e.h.Write(e.buf[:])
}

func (e *encoder) str(s string) {
	e.count(len(s))
	e.h.Write([]byte(s))
}

func (e *encoder) strs(ss []string) {
	e.count(len(ss))
	for _, s := range ss {
		e.str(s)
	}
}
