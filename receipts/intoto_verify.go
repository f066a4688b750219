package receipts

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// maxExportLine bounds one envelope of an export: a run's statement holds
// its argv, cwd and evidence ids, far below this.
const maxExportLine = 16 << 20

// ExportRefusedError is returned by [VerifyExportWitnessed] for a line
// that is a well-formed envelope but does not verify: Reason says which
// check failed.
type ExportRefusedError struct {
	Line   int
	Reason string
}

func (e *ExportRefusedError) Error() string {
	return fmt.Sprintf("export line %d refused: %s", e.Line, e.Reason)
}

// MalformedExportError is returned by [VerifyExportWitnessed] for a line
// that is not a strict DSSE envelope of a run statement at all.
type MalformedExportError struct {
	Line int
	Err  error
}

func (e *MalformedExportError) Error() string {
	return fmt.Sprintf("export line %d is not a run attestation: %v", e.Line, e.Err)
}

func (e *MalformedExportError) Unwrap() error { return e.Err }

// runStatement is [Statement] with its predicate typed, for a strict
// decode.
type runStatement struct {
	Type          string       `json:"_type"`
	Subject       []Subject    `json:"subject"`
	PredicateType string       `json:"predicateType"`
	Predicate     RunPredicate `json:"predicate"`
}

// WitnessQuorum is how many witnesses of Policy ([[witness]]) must
// cosign a bundle's checkpoint ([VerifyCosignatures]), counting only
// cosignatures made at or after Since when it is set.
type WitnessQuorum struct {
	Policy *approval.Policy
	K      int
	Since  time.Time
}

// VerifyExportWitnessed reads what [ExportInToto] wrote, one envelope a
// line, and checks each line exactly: a strict DSSE envelope of
// [InTotoPayloadType] with one signature, by pub, over its PAE; an in-toto
// Statement v1 of [RunPredicateV1] that decodes strictly; at least one
// subject, each a sha256 in lowercase hex; and no run id twice. It returns
// what it verified; a [*MalformedExportError] or [*ExportRefusedError]
// names the first line that fails. An empty export verifies no runs and is
// not an error.
//
// A line that is a [RunBundle] (`export --proofs`) is checked the same way
// for its envelope, and its proofs too: the checkpoint is a note signed by
// pub for the run's host, and the run's intent (and outcome) receipts,
// as the attestation names them, are leaves of the tree it signs.
//
// The zero q asks for no witness. With q.K above 0, every line must be a
// [RunBundle] whose checkpoint K witnesses cosign. Then a run the runner
// key's holder made up, with a tree and checkpoint of its own, is refused
// unless the witnesses collude: they cosign only checkpoints consistent
// with all they saw.
func VerifyExportWitnessed(r io.Reader, pub keys.Public, q WitnessQuorum) (*ExportVerified, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	seen := map[string]int{}
	v := &ExportVerified{}
	n := 0
	for no := 1; ; no++ {
		v.Runs = n
		line, err := readExportLine(br)
		if err == io.EOF {
			return v, nil
		}
		if err != nil {
			return v, &MalformedExportError{Line: no, Err: err}
		}
		var kind struct {
			MediaType *string `json:"mediaType"`
		}
		var bundle *RunBundle
		var env dsse.Envelope
		if json.Unmarshal(line, &kind) == nil && kind.MediaType != nil {
			bundle = &RunBundle{}
			if err := strictjson.Unmarshal(line, bundle); err != nil {
				return v, &MalformedExportError{Line: no, Err: fmt.Errorf("not a run bundle: %w", err)}
			}
			if bundle.MediaType != RunBundleV1 || bundle.DSSEEnvelope == nil {
				return v, &ExportRefusedError{Line: no, Reason: fmt.Sprintf("mediaType %q with no envelope, want %q", bundle.MediaType, RunBundleV1)}
			}
			env = *bundle.DSSEEnvelope
		} else if err := strictjson.Unmarshal(line, &env); err != nil {
			return v, &MalformedExportError{Line: no, Err: fmt.Errorf("not a DSSE envelope: %w", err)}
		}
		body, err := base64.StdEncoding.Strict().DecodeString(env.Payload)
		if err != nil {
			return v, &MalformedExportError{Line: no, Err: fmt.Errorf("payload is not base64: %w", err)}
		}
		if env.PayloadType != InTotoPayloadType {
			return v, &ExportRefusedError{Line: no, Reason: fmt.Sprintf("payloadType %q, want %q", env.PayloadType, InTotoPayloadType)}
		}
		if err := approval.VerifyWith(pub, &env); err != nil {
			return v, &ExportRefusedError{Line: no, Reason: fmt.Sprintf("the signature does not verify under key %.12s… (%s): %v", pub.ID(), pub, err)}
		}
		var st runStatement
		if err := strictjson.Unmarshal(body, &st); err != nil {
			return v, &MalformedExportError{Line: no, Err: fmt.Errorf("payload is not a run statement: %w", err)}
		}
		if st.Type != StatementV1 {
			return v, &ExportRefusedError{Line: no, Reason: fmt.Sprintf("statement _type %q, want %q", st.Type, StatementV1)}
		}
		if st.PredicateType != RunPredicateV1 {
			return v, &ExportRefusedError{Line: no, Reason: fmt.Sprintf("predicateType %q, want %q", st.PredicateType, RunPredicateV1)}
		}
		if len(st.Subject) == 0 {
			return v, &ExportRefusedError{Line: no, Reason: "no subject: a run attests at least its program"}
		}
		for _, s := range st.Subject {
			if h := s.Digest["sha256"]; len(h) != 64 || !isLowerHex(h) || len(s.Digest) != 1 {
				return v, &ExportRefusedError{Line: no, Reason: fmt.Sprintf("subject %q: want exactly a sha256 digest in lowercase hex", s.Name)}
			}
		}
		id := st.Predicate.RunID
		if id == "" {
			return v, &ExportRefusedError{Line: no, Reason: "the predicate names no run_id"}
		}
		if first, ok := seen[id]; ok {
			return v, &ExportRefusedError{Line: no, Reason: fmt.Sprintf("run %s is attested twice (first on line %d)", id, first)}
		}
		seen[id] = no
		if bundle == nil && q.K > 0 {
			return v, &ExportRefusedError{Line: no, Reason: fmt.Sprintf("no checkpoint for witnesses to cosign: %d asked for (export with --proofs --witnessed)", q.K)}
		}
		if bundle != nil {
			size, why := verifyBundleProofs(bundle, &st, pub)
			if why != "" {
				return v, &ExportRefusedError{Line: no, Reason: why}
			}
			if q.K > 0 {
				names, err := VerifyCosignatures([]byte(bundle.Checkpoint), q.Policy, q.K, q.Since)
				if err != nil {
					return v, &ExportRefusedError{Line: no, Reason: err.Error()}
				}
				if v.Witnessed == 0 || len(names) < v.Witnessed {
					v.Witnessed = len(names)
				}
			}
			v.Proved++
			v.TreeSize = max(v.TreeSize, size)
		}
		n++
	}
}

// ExportVerified is what [VerifyExportWitnessed] verified: how many runs,
// how many of them with inclusion proofs ([RunBundle]), and the largest
// tree those proofs are against.
type ExportVerified struct {
	Runs     int
	Proved   int
	TreeSize uint64
	// Witnessed is the fewest witnesses that cosigned a bundle's
	// checkpoint, when a quorum was asked for.
	Witnessed int
}

// readExportLine returns the next line without its newline, io.EOF at the
// end, and an error for a line longer than maxExportLine or one cut off
// without its newline.
func readExportLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxExportLine {
			return nil, fmt.Errorf("longer than %d bytes", maxExportLine)
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(buf, []byte("\n")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(buf) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return nil, errors.New("cut off: no newline at its end")
		default:
			return nil, err
		}
	}
}

func isLowerHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && bytes.IndexFunc([]byte(s), func(r rune) bool { return r >= 'A' && r <= 'F' }) < 0
}
