package localapi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/strictjson"
	"github.com/prod-write/prod-write/receipts"
)

// VerifyVSA checks a VSA that replay --vsa wrote, exactly (receipts.VSA's
// Verify): its DSSE signature under req.Pub, its statement and predicate
// types, that its subject is the hash of the journal's last line and its
// resource counts the journal's entries, and that replay's verdict was
// PASSED. Offline, with the caller's rights: it reads the two files and
// nothing of the service's.
func VerifyVSA(req api.VerifyVSARequest) (*api.VerifyVSAResult, error) {
	pub, err := ReadPublic(req.Pub)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(req.VSA)
	if err != nil {
		return nil, fmt.Errorf("reading the VSA: %w", err)
	}
	v, err := receipts.ParseVSA(b)
	if err != nil {
		return nil, &DataError{Err: fmt.Errorf("%s: %w", req.VSA, err)}
	}
	in, err := os.Open(req.Journal)
	if err != nil {
		return nil, fmt.Errorf("reading the journal: %w", err)
	}
	defer in.Close()
	head, entries, err := receipts.JournalHead(in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.Journal, err)
	}
	if err := v.Verify(pub, head, entries); err != nil {
		return nil, fmt.Errorf("%s for %s: %w", req.VSA, req.Journal, err)
	}
	p := v.Statement.Predicate
	return &api.VerifyVSAResult{VSA: req.VSA, Journal: req.Journal, Verified: true, Result: p.VerificationResult,
		Subject: v.Statement.Subject[0].Name, Head: head, Entries: entries, Policy: "sha256:" + p.Policy.Digest["sha256"],
		TimeVerified: p.TimeVerified, KeyID: pub.ID()}, nil
}

// VerifyExport checks a bundle receipts export wrote under the runner's
// public key req.Pub (receipts.VerifyExportWitnessed). Offline, as VerifyVSA.
func VerifyExport(req api.VerifyExportRequest) (*api.VerifyExportResult, error) {
	pub, err := ReadPublic(req.Pub)
	if err != nil {
		return nil, err
	}
	q := receipts.WitnessQuorum{K: req.Witnesses}
	switch {
	case req.Witnesses < 0:
		return nil, &UsageError{Msg: "--witnesses counts witnesses: 0 or more"}
	case req.Witnesses > 0 && req.Trust == "":
		return nil, &UsageError{Msg: "--witnesses needs --trust: the trust policy whose [[witness]] keys count"}
	case req.Witnesses > 0:
		if q.Policy, err = approval.LoadPolicy(req.Trust); err != nil {
			return nil, &DataError{Err: err}
		}
		if req.WitnessMaxAge > 0 {
			q.Since = time.Now().Add(-req.WitnessMaxAge)
		}
	}
	in, err := os.Open(req.Export)
	if err != nil {
		return nil, fmt.Errorf("reading the export: %w", err)
	}
	defer in.Close()
	v, err := receipts.VerifyExportWitnessed(in, pub, q)
	var bad *receipts.MalformedExportError
	if errors.As(err, &bad) {
		return nil, &DataError{Err: fmt.Errorf("%s: %w", req.Export, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.Export, err)
	}
	return &api.VerifyExportResult{Export: req.Export, Verified: true, Runs: v.Runs, Proved: v.Proved, TreeSize: v.TreeSize, KeyID: pub.ID(), Witnessed: v.Witnessed}, nil
}

// ReadPublic reads a public key as --pub takes it: the trust.toml line
// itself, or a file holding it or a PKIX PEM block.
func ReadPublic(s string) (keys.Public, error) {
	if strings.HasPrefix(s, keys.PublicPrefix) {
		p, err := keys.ParsePublic(s)
		if err != nil {
			return nil, &DataError{Err: fmt.Errorf("--pub: %w", err)}
		}
		return p, nil
	}
	b, err := os.ReadFile(s)
	if err != nil {
		return nil, fmt.Errorf("--pub: %w", err)
	}
	var p keys.Public
	if line := strings.TrimSpace(string(b)); strings.HasPrefix(line, keys.PublicPrefix) {
		p, err = keys.ParsePublic(line)
	} else {
		p, err = keys.ParsePublicPEM(b)
	}
	if err != nil {
		return nil, &DataError{Err: fmt.Errorf("--pub %s: %w", s, err)}
	}
	return p, nil
}

// ConsistencyDoc is `receipts consistency --json`: the proof, which
// VerifyConsistency reads back.
type ConsistencyDoc struct {
	FormatVersion int `json:"format_version"`
	api.ReceiptsConsistencyResult
}

// VerifyConsistency checks a consistency proof between two checkpoint
// notes, offline: both notes under a runner key of req.Trust's policy for
// one origin, then the proof between their trees
// (merkle/proof.VerifyConsistency). It reads the policy and the proof
// file, with the caller's rights, and no journal.
func VerifyConsistency(req api.VerifyConsistencyRequest) (*api.VerifyConsistencyResult, error) {
	policy, err := approval.LoadPolicy(req.Trust)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(req.Proof)
	if err != nil {
		return nil, err
	}
	var doc ConsistencyDoc
	if err := strictjson.Unmarshal(bytes.TrimSuffix(b, []byte("\n")), &doc); err != nil {
		return nil, &DataError{Err: fmt.Errorf("%s is not what receipts consistency --json prints: %w", req.Proof, err)}
	}
	old, new, err := OpenNotePair(policy, []byte(req.Old), []byte(req.New))
	if err != nil {
		return nil, err
	}
	if err := CheckConsistencyResult(&doc.ReceiptsConsistencyResult, old, new); err != nil {
		return nil, err
	}
	return &api.VerifyConsistencyResult{FormatVersion: FormatVersion, Verified: true, Origin: old.Origin, OldSize: old.Size, NewSize: new.Size}, nil
}
