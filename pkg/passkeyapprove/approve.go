// Package passkeyapprove is the service's side of an approval made on the
// approval page with an approver's passkey
// (docs/adr/0048-approval-page.md): it issues the v2 statement an assertion
// signs, with a nonce of its own, and admits the approval.PasskeyDecision
// the page's server signed with its bridge key only once the nonce is this
// service's, for exactly that statement, unspent and unexpired, and the
// assertion verifies in the gate as run will verify it.
//
// Its state is files of the service's state directory, each created whole
// and exclusively (durable.CreateOnce), so that it survives a restart and a
// nonce is spent once whatever races:
//
//	DIR/nonces/HEX       a statement issued: HEX is the sha256 of a domain
//	                     and the nonce; the statement's fields
//	DIR/nonces/HEX.used  the nonce spent
//
// [Issuer.Sweep] removes a statement once it is [SweepGrace] past its
// expiry, and its marker only after it: a nonce whose statement is gone is
// refused as unknown whatever its marker says, so no order of removals,
// and no crash between two, makes a nonce answer again.
//
// Everything the page hands over is a stranger's input: the nonce names a
// file only through its hash, and every field of the statement is compared
// with the one the service issued, never taken from the caller.
package passkeyapprove

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// nonceBytes is a nonce's size: 256 random bits.
const nonceBytes = 32

// Issuer is the passkey-approval state of one service.
type Issuer struct {
	// Dir is the state directory's passkey-approval directory.
	Dir string
	Now func() time.Time
}

// issued is a stored statement, found by the hash of its nonce.
type issued struct {
	Fingerprint string    `json:"fingerprint"`
	Decision    string    `json:"decision"`
	Record      string    `json:"record"`
	Issued      time.Time `json:"issued"`
	Expires     time.Time `json:"expires"`
}

// Statement is a statement issued: what the passkey is to sign (Challenge
// is approval.PasskeyChallenge of it, version 2).
type Statement struct {
	approval.PasskeyStatement
	Challenge [32]byte
}

// nonceFile names a nonce's file: sha256 over a domain and the nonce.
func nonceFile(nonce []byte) string {
	h := sha256.New()
	h.Write([]byte("prod-write passkey approval nonce v1\x00"))
	h.Write(nonce)
	return hex.EncodeToString(h.Sum(nil))
}

// Challenge issues a version 2 statement of decision on record of the plan
// stored under fp, src's: a fresh nonce, issued now, expiring
// approval.DefaultAnswerTTL later. The plan must be stored and the record
// one of its evidence (an approval answers a record; a deny may too).
func (i *Issuer) Challenge(src bridge.Source, fp, decision, record string) (*Statement, error) {
	if decision != approval.Approve && decision != approval.Deny {
		return nil, refusal.New(refusal.SignatureInvalid, "decision %q is neither approve nor deny", decision).For("", fp)
	}
	if decision == approval.Approve && record == "" {
		return nil, refusal.New(refusal.NoApproval, "an approval must answer a certainty record").For("", fp)
	}
	if err := store.CheckFingerprint(fp); err != nil {
		return nil, refusal.New(refusal.PlanAbsent, "%v", err).For("", fp)
	}
	if _, err := src.Store.GetPlan(fp); errors.Is(err, store.ErrNotFound) {
		return nil, refusal.New(refusal.PlanAbsent, "no plan with this fingerprint is stored").For("", fp)
	} else if err != nil {
		return nil, fmt.Errorf("reading plan: %w", err)
	}
	nonce := make([]byte, nonceBytes)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("making a nonce: %w", err)
	}
	now := i.Now().UTC()
	rec := issued{Fingerprint: fp, Decision: decision, Record: record, Issued: now, Expires: now.Add(approval.DefaultAnswerTTL)}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(i.Dir, "nonces")
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("passkey approval nonces: %w", err)
	}
	if err := durable.CreateOnce(filepath.Join(dir, nonceFile(nonce)), b, 0o600); err != nil {
		return nil, fmt.Errorf("storing the nonce's statement: %w", err)
	}
	// Each statement issued sweeps up to SweepLimit expired ones, so the
	// directory does not grow with every decision ever begun. A sweep
	// that fails leaves files for the next one, and nothing it leaves
	// makes a nonce usable again, so the statement is issued all the same.
	_, _ = i.Sweep(now)
	st := approval.PasskeyStatement{Fingerprint: fp, Decision: decision, Record: record, Nonce: nonce, Issued: now, Expires: rec.Expires, Version: 2}
	return &Statement{PasskeyStatement: st, Challenge: approval.PasskeyChallenge(st)}, nil
}

// errNonce is the one refusal for a nonce this service did not issue for
// the statement: the caller learns nothing of which nonces exist.
func errNonce(fp, why string) error {
	return refusal.New(refusal.SignatureInvalid, "the passkey statement %s", why).Needs("a new challenge from the approval page").For("", fp)
}

// spend checks that d's statement is one this service issued, field for
// field, not expired at now, and spends its nonce: of any number of
// callers with one nonce, exactly one gets past.
func (i *Issuer) spend(d *approval.PasskeyDecision, now time.Time) error {
	if len(d.Nonce) != nonceBytes {
		return errNonce(d.Fingerprint, "carries no nonce of this service")
	}
	path := filepath.Join(i.Dir, "nonces", nonceFile(d.Nonce))
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return unknown(d, now)
	}
	if err != nil {
		return fmt.Errorf("reading the passkey statement: %w", err)
	}
	var rec issued
	if err := strictjson.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("the stored passkey statement does not decode: %w", err)
	}
	switch {
	case rec.Fingerprint != d.Fingerprint:
		return errNonce(d.Fingerprint, "was issued for another plan")
	case rec.Decision != d.Decision:
		return errNonce(d.Fingerprint, "was issued for another decision")
	case rec.Record != d.Record:
		return errNonce(d.Fingerprint, "was issued for another certainty record")
	case !rec.Issued.Equal(d.Issued) || !rec.Expires.Equal(d.Expires):
		return errNonce(d.Fingerprint, "was issued at another time")
	}
	if !now.Before(rec.Expires) {
		return errExpired(d.Fingerprint, rec.Expires)
	}
	return i.commit(d, path, now)
}

// commit spends the nonce of the statement at path, which spend has
// judged: it creates the marker path.used exclusively, then checks the
// statement is still there. A sweep removes a statement before its marker
// (see [Issuer.Sweep]), so when the statement is there after this caller
// created the marker, no earlier marker of this nonce was removed before
// it: the create would have failed. Without the check, a caller that
// judged the statement, then stalled while a sweep removed the statement
// and the marker of an earlier use, would spend the nonce a second time.
func (i *Issuer) commit(d *approval.PasskeyDecision, path string, now time.Time) error {
	err := durable.CreateOnce(path+".used", []byte(now.Format(time.RFC3339Nano)+"\n"), 0o600)
	if errors.Is(err, os.ErrExist) {
		return refusal.New(refusal.EvidenceConsumed, "the passkey statement's nonce was used already: a nonce answers once").Needs("a new challenge from the approval page").For("", d.Fingerprint)
	}
	if err != nil {
		return fmt.Errorf("spending the nonce: %w", err)
	}
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return unknown(d, now) // swept meanwhile; the marker is an orphan the next sweep removes
	} else if err != nil {
		return fmt.Errorf("reading the passkey statement: %w", err)
	}
	return nil
}

// errExpired refuses a statement that expired at exp.
func errExpired(fp string, exp time.Time) error {
	return refusal.New(refusal.EvidenceExpired, "the passkey statement expired at %s", exp.Format(time.RFC3339)).Needs("a new challenge from the approval page").For("", fp)
}

// unknown refuses d, whose nonce names no statement of this service's:
// never issued, or issued and swept. A statement is swept only
// [SweepGrace] past its expiry, so a decision whose own expiry has passed
// is refused as expired, as it was before its statement was swept; any
// other is refused as a nonce this service did not issue. Both refuse, and
// neither depends on which nonces exist.
func unknown(d *approval.PasskeyDecision, now time.Time) error {
	if !now.Before(d.Expires) {
		return errExpired(d.Fingerprint, d.Expires)
	}
	return errNonce(d.Fingerprint, "carries a nonce this service did not issue")
}

// Admitted is a passkey decision stored.
type Admitted struct {
	ID           string
	Fingerprint  string
	Approver     string
	Decision     string
	Credential   string
	UserVerified bool
}

// admitMu serialises Admit in this process (the nonce's exclusive
// creation serialises it between processes).
var admitMu sync.Mutex

// Admit stores env, a passkey decision the approval page's server signed
// with its bridge key, in src's store, when: env verifies under a key of
// the policy whose principal holds role bridge and is a passkey decision;
// its statement is one this service issued (nonce, fingerprint, decision,
// record, issued, expiry), unexpired at now and unspent, which Admit
// spends; and the gate, evaluating the plan with env among its evidence
// and the store's sign counts, finds env valid, passkey-verified. Only
// then is env stored. A refused decision has spent its nonce all the same:
// it cannot be mended and sent again.
func (i *Issuer) Admit(src bridge.Source, env *approval.Envelope, now time.Time) (*Admitted, error) {
	signed, err := src.Policy.Open(env)
	if err != nil {
		return nil, err
	}
	if !signed.Signer.Has(approval.RoleBridge) {
		return nil, refusal.New(refusal.RoleMissing, "the passkey decision is signed by %s, who does not hold the bridge role", signed.Signer.ID).Needs("a passkey decision signed with the approval page's bridge key")
	}
	if signed.Type != approval.TypePasskey {
		return nil, refusal.New(refusal.SignatureInvalid, "the envelope is a %s, not a passkey decision", signed.Type)
	}
	var d approval.PasskeyDecision
	if err := signed.Decode(&d); err != nil {
		return nil, refusal.New(refusal.SignatureInvalid, "the passkey decision does not decode: %v", err)
	}
	if src.Policy.Passkey == nil {
		return nil, refusal.New(refusal.SignatureInvalid, "the trust policy has no [passkey] table, so no passkey decision verifies").For("", d.Fingerprint)
	}
	if err := store.CheckFingerprint(d.Fingerprint); err != nil {
		return nil, refusal.New(refusal.PlanAbsent, "%v", err)
	}
	admitMu.Lock()
	defer admitMu.Unlock()
	if err := i.spend(&d, now); err != nil {
		return nil, err
	}
	in, err := bridge.Gather(src, d.Fingerprint)
	if err != nil {
		return nil, err
	}
	plan, _, err := src.Policy.DecodePlan(in.Plan)
	if err != nil {
		return nil, err
	}
	op, ok := src.Registry.Get(plan.Operation)
	if !ok {
		return nil, refusal.New(refusal.OperationAbsent, "operation %q is no longer in the registry", plan.Operation).For(plan.Operation, d.Fingerprint)
	}
	counts, err := src.Store.SignCounts(src.Policy.PasskeyCredentialIDs())
	if err != nil {
		return nil, fmt.Errorf("reading sign counts: %w", err)
	}
	// The gate itself, over the evidence with env among it: what run
	// will verify of env is what is verified here.
	dec, gateErr := approval.Evaluate(approval.Input{Plan: in.Plan, Evidence: append(in.Evidence, env),
		Unreadable: append(runner.ProblemStrings(in.Problems), in.HistoryProblems...), Policy: src.Policy, Op: op, Now: now,
		Used: in.Used, BreakGlass: in.History, PreconditionUnchecked: true, SignCounts: counts})
	if _, ok := refusal.As(gateErr); gateErr != nil && !ok {
		return nil, gateErr
	}
	var seen *approval.Assessed
	if dec != nil {
		for _, a := range dec.Evidence {
			if a.ID == signed.ID {
				seen = a
			}
		}
	}
	refuse := func(code refusal.Code, format string, args ...any) error {
		return refusal.New(code, format, args...).For(plan.Operation, d.Fingerprint)
	}
	if seen == nil {
		return nil, refuse(refusal.SignatureInvalid, "the gate did not judge the passkey decision")
	}
	if !seen.Valid || seen.Passkey == nil {
		code := refusal.SignatureInvalid
		if seen.Problem != nil {
			code = *seen.Problem
		}
		return nil, refuse(code, "the passkey decision does not count at the gate: %s", seen.Why)
	}
	if err := src.Store.PutEvidence(d.Fingerprint, signed.ID, env); err != nil {
		return nil, fmt.Errorf("storing the passkey decision: %w", err)
	}
	return &Admitted{ID: signed.ID, Fingerprint: d.Fingerprint, Approver: d.Approver, Decision: d.Decision,
		Credential: seen.Passkey.Credential, UserVerified: seen.Passkey.UserVerified}, nil
}
