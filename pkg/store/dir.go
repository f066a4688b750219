package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/prod-write/prod-write/pkg/dsse"

	"github.com/prod-write/prod-write/pkg/durable"
)

// Dir is the embedded store: a directory of files, every write atomic and
// durable, consumption by exclusive creation.
//
//	plans/HEX.json             the signed plan for fingerprint sha256:HEX
//	evidence/HEX/ID.json       records bound to that fingerprint; under
//	                           BreakGlassKey(P), P's break-glass records and reviews
//	consumed/ID.SLOT           one file per spent use of record ID, holding the run id
//	consumed/ID.run-RUN        the slot run RUN holds (so a retry spends nothing more)
//	signcount/KEY.V            version V of a passkey credential's sign count, "COUNT RUN"
//	content/HEX                file content plans bind, under its sha256:HEX
type Dir struct {
	Root string
}

// ContentReserve is the room a [Dir] leaves on its file system when it
// keeps content: content a caller sent never takes the space the
// journal's receipts, plans and records need
// (docs/adr/0063-file-content-kept-with-the-plan.md).
const ContentReserve = 64 << 20

// freeBytes is how many bytes of dir's file system this process may
// write; a variable so that a test can fill the disk.
var freeBytes = func(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

var _ Store = (*Dir)(nil)

// OpenDir returns the store rooted at root, creating its directories.
func OpenDir(root string) (*Dir, error) {
	for _, d := range []string{"plans", "evidence", "consumed"} {
		if err := durable.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return nil, fmt.Errorf("opening store: %w", err)
		}
	}
	return &Dir{Root: root}, nil
}

func encode(env *dsse.Envelope) ([]byte, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func decode(path string, data []byte) (*dsse.Envelope, error) {
	var env dsse.Envelope
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("%s: not a DSSE envelope: %w", path, err)
	}
	if env.PayloadType == "" || env.Payload == "" || len(env.Signatures) == 0 {
		return nil, fmt.Errorf("%s: not a DSSE envelope: missing payloadType, payload or signatures", path)
	}
	return &env, nil
}

// putOnce creates path with data unless it exists; an existing file with
// the same bytes is success, with other bytes ErrExists.
func putOnce(path string, data []byte) error {
	err := durable.CreateOnce(path, data, 0o600)
	if errors.Is(err, os.ErrExist) {
		old, rerr := os.ReadFile(path)
		if rerr == nil && bytes.Equal(old, data) {
			return nil
		}
		return fmt.Errorf("%s: %w", path, ErrExists)
	}
	return err
}

// PutPlan implements [Store].
func (d *Dir) PutPlan(fp string, env *dsse.Envelope) error {
	if err := CheckFingerprint(fp); err != nil {
		return err
	}
	data, err := encode(env)
	if err != nil {
		return err
	}
	return putOnce(filepath.Join(d.Root, "plans", hexOf(fp)+".json"), data)
}

// GetPlan implements [Store].
func (d *Dir) GetPlan(fp string) (*dsse.Envelope, error) {
	if err := CheckFingerprint(fp); err != nil {
		return nil, err
	}
	path := filepath.Join(d.Root, "plans", hexOf(fp)+".json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("plan %s: %w", fp, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return decode(path, data)
}

// PutEvidence implements [Store].
func (d *Dir) PutEvidence(fp, id string, env *dsse.Envelope) error {
	if err := CheckFingerprint(fp); err != nil {
		return err
	}
	if err := CheckID(id); err != nil {
		return err
	}
	data, err := encode(env)
	if err != nil {
		return err
	}
	dir := filepath.Join(d.Root, "evidence", hexOf(fp))
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return putOnce(filepath.Join(dir, id+".json"), data)
}

// PutContent implements [Store]: content/HEX, created once. It refuses
// content that would leave less than [ContentReserve] free.
func (d *Dir) PutContent(sum string, data []byte) error {
	if err := CheckContent(sum, data); err != nil {
		return err
	}
	dir := filepath.Join(d.Root, "content")
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(dir, hexOf(sum))
	if _, err := os.Lstat(path); err == nil {
		return putOnce(path, data) // kept already: compared, not written
	}
	if free, err := freeBytes(dir); err == nil && free-int64(len(data)) < ContentReserve {
		return fmt.Errorf("keeping content %.19s…: %s has %d bytes free, and content never takes the last %d: %w", sum, dir, free, ContentReserve, &os.PathError{Op: "write", Path: dir, Err: syscall.ENOSPC})
	}
	return putOnce(path, data)
}

// Content implements [Store].
func (d *Dir) Content(sum string) ([]byte, error) {
	if err := CheckFingerprint(sum); err != nil {
		return nil, fmt.Errorf("content sum: %w", err)
	}
	path := filepath.Join(d.Root, "content", hexOf(sum))
	fl, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("content %.19s…: %w", sum, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	if fi, err := fl.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() || fi.Size() > MaxContent {
		return nil, fmt.Errorf("%s: not content this store kept", path)
	}
	return io.ReadAll(io.LimitReader(fl, MaxContent))
}

// PlansWithPrefix returns the fingerprints of the stored plans whose hex
// digits start with prefix (lowercase hex), for fingerprint prefixes on the
// command line.
func (d *Dir) PlansWithPrefix(prefix string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(d.Root, "plans"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		h, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && hex64(h) && strings.HasPrefix(h, prefix) {
			out = append(out, "sha256:"+h)
		}
	}
	return out, nil
}

// Evidence implements [Store].
func (d *Dir) Evidence(fp string) ([]*dsse.Envelope, []Problem, error) {
	if err := CheckFingerprint(fp); err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(d.Root, "evidence", hexOf(fp))
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var out []*dsse.Envelope
	var problems []Problem
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp-") {
			continue // a write in progress, or one a crash left behind
		}
		if !ok || CheckID(id) != nil || !e.Type().IsRegular() {
			problems = append(problems, Problem{Path: path, Err: "foreign file: not a record this store wrote"})
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			problems = append(problems, Problem{Path: path, Err: err.Error()})
			continue
		}
		env, err := decode(path, data)
		if err != nil {
			problems = append(problems, Problem{Path: path, Err: err.Error()})
			continue
		}
		out = append(out, env)
	}
	return out, problems, nil
}

// Consume implements [Store]: use SLOT of record ID is spent by creating
// consumed/ID.SLOT exclusively, holding "SLOT RUN", and the run's claim
// consumed/ID.run-RUN is a hard link to it, made with link(2), which is
// as exclusive as the create; the directory is fsynced before Consume
// returns. Slots are taken lowest first, so the spent ones of a record are
// always 0 to N-1. A run that already holds a slot gets it back and
// spends nothing more (a retry). One inode a use, not two: on an ext4
// without a journal, allocating an inode after many deletions costs up to
// a millisecond (docs/adr/0056-a-persistent-client-and-one-inode-a-use.md).
func (d *Dir) Consume(id string, uses int, run string) (int, error) {
	if err := CheckID(id); err != nil {
		return 0, err
	}
	if err := CheckRunID(run); err != nil {
		return 0, err
	}
	dir := filepath.Join(d.Root, "consumed")
	claim := filepath.Join(dir, id+".run-"+run)
	if slot, ok := d.claimed(claim); ok {
		return slot, nil
	}
	start := 0
	if uses > 1 {
		start = d.spent(id)
	}
	for slot := start; slot < uses; slot++ {
		path := filepath.Join(dir, id+"."+strconv.Itoa(slot))
		err := durable.CreateExclusive(path, []byte(strconv.Itoa(slot)+" "+run), 0o600, false)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if err := os.Link(path, claim); err != nil {
			return 0, err
		}
		if err := durable.SyncDir(dir); err != nil {
			return 0, err
		}
		return slot, nil
	}
	return 0, Consumed(id, uses)
}

// claimed returns the slot the claim file at path records, if there is
// one: its content's first word, "SLOT RUN" (a link to the slot's file)
// or, as a store written before ADR 0056 holds it, "SLOT" alone.
func (d *Dir) claimed(path string) (int, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	first, _, _ := strings.Cut(string(data), " ")
	slot, err := strconv.Atoi(first)
	return slot, err == nil && slot >= 0
}

// spent counts the spent uses of id. Slots are taken lowest first and
// never removed, so the spent ones are exactly 0 to n-1, and a galloping
// search finds n with O(log n) lstats rather than one per use: a Gera go
// with thousands of uses costs a dozen lookups per run, not thousands. A
// count that is stale by the time it is used is harmless: Consume's
// exclusive create is what decides.
func (d *Dir) spent(id string) int {
	dir := filepath.Join(d.Root, "consumed")
	taken := func(slot int) bool {
		_, err := os.Lstat(filepath.Join(dir, id+"."+strconv.Itoa(slot)))
		return err == nil
	}
	if !taken(0) {
		return 0
	}
	lo, hi := 0, 1 // slot lo is taken; hi is the next probe
	for taken(hi) {
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1 { // lo taken, hi free
		if mid := lo + (hi-lo)/2; taken(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// Used implements [Store].
func (d *Dir) Used(ids []string) (map[string]int, error) {
	out := map[string]int{}
	for _, id := range ids {
		if CheckID(id) != nil {
			continue
		}
		if n := d.spent(id); n > 0 {
			out[id] = n
		}
	}
	return out, nil
}

// Plans lists the fingerprints of stored plans, sorted.
func (d *Dir) Plans() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(d.Root, "plans"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if h, ok := strings.CutSuffix(e.Name(), ".json"); ok && CheckID(h) == nil {
			out = append(out, "sha256:"+h)
		}
	}
	sort.Strings(out)
	return out, nil
}

// AdvanceSignCount implements [Store] by exclusive creation, like
// consumption: credential cred's counts are a chain of versions
// signcount/KEY.V (KEY is [CredKey]), each holding "COUNT RUN" and each
// created whole by link(2) ([durable.CreateOnce]). An
// advance reads the newest version, checks count is above it, and creates
// the next version exclusively; losing that race to another run means
// reading the winner's count and checking again, so two runs are
// serialised and the one whose count is not above is refused.
func (d *Dir) AdvanceSignCount(cred string, count uint32, run string) error {
	if err := CheckRunID(run); err != nil {
		return err
	}
	dir := filepath.Join(d.Root, "signcount")
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	k := CredKey(cred)
	for {
		v, stored, holder, ok, err := d.signCount(k)
		if err != nil {
			return err
		}
		if ok && stored == count && holder == run {
			return nil // this run's own advance, retried
		}
		if ok && count <= stored {
			return SignCountBack(cred, count, stored)
		}
		next := 0
		if ok {
			next = v + 1
		}
		path := filepath.Join(dir, k+"."+strconv.Itoa(next))
		// CreateOnce, not CreateExclusive: a racing reader must never see
		// a version empty or half written.
		err = durable.CreateOnce(path, []byte(strconv.FormatUint(uint64(count), 10)+" "+run), 0o600)
		if errors.Is(err, os.ErrExist) {
			continue // another run advanced first: judge against its count
		}
		return err
	}
}

// signCount returns the newest version of credential key k's chain, the
// count and run it holds, and whether there is one.
func (d *Dir) signCount(k string) (v int, count uint32, run string, ok bool, err error) {
	dir := filepath.Join(d.Root, "signcount")
	name := func(i int) string { return filepath.Join(dir, k+"."+strconv.Itoa(i)) }
	taken := func(i int) bool { _, err := os.Lstat(name(i)); return err == nil }
	if !taken(0) {
		return 0, 0, "", false, nil
	}
	lo, hi := 0, 1
	for taken(hi) {
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; taken(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	data, err := os.ReadFile(name(lo))
	if err != nil {
		return 0, 0, "", false, err
	}
	c, r, _ := strings.Cut(string(data), " ")
	n, err := strconv.ParseUint(c, 10, 32)
	if err != nil {
		return 0, 0, "", false, fmt.Errorf("%s: not a sign count: %w", name(lo), err)
	}
	return lo, uint32(n), r, true, nil
}

// SignCounts implements [Store].
func (d *Dir) SignCounts(creds []string) (map[string]uint32, error) {
	out := map[string]uint32{}
	for _, c := range creds {
		_, n, _, ok, err := d.signCount(CredKey(c))
		if err != nil {
			return nil, err
		}
		if ok {
			out[c] = n
		}
	}
	return out, nil
}
