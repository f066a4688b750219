// Package archive is the S3 receipt archive (docs/DESIGN.md §7, §10): a copy of the
// receipt journal held somewhere the runner host cannot rewrite, so that
// receipts survive the host and cutting off the newest ones is detectable.
//
// # Layout
//
// Each journal line is its own object, written once:
//
//	PREFIX/SEQ-HASH.json
//
// SEQ is the receipt's sequence number zero-padded to 12 digits, so that
// listing order is journal order, and HASH the line's chain hash
// ([receipts.LineHash]). The object holds the line's bytes, without the
// newline.
//
// # Never overwritten
//
// Every PutObject carries If-None-Match: *, so S3 refuses to replace an
// object (412). A 412 is success only when the object there has the same
// bytes; other bytes are a [*ConflictError]. When the bucket has object
// lock, each object also gets a retention (GOVERNANCE or COMPLIANCE, per
// [Config]), or the bucket's default retention when Config names no mode.
//
// The local journal stays the write-ahead record: the archive is written
// after it, best effort, and [Archive.Sync] ships whatever an outage left
// behind (docs/DISTRIBUTED.md).
package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/prod-write/prod-write/pkg/awsconf"
	"github.com/prod-write/prod-write/receipts"
)

// Lock modes of object-lock retention.
const (
	Governance = "GOVERNANCE"
	Compliance = "COMPLIANCE"
)

// DefaultTimeout bounds one archive call (one object put, with its
// retries, or one page of a listing).
const DefaultTimeout = 10 * time.Second

// Config says where the archive is and how its objects are locked.
type Config struct {
	Bucket string
	// Prefix is the key prefix, without leading or trailing slashes.
	// Each journal needs its own: two runner hosts shipping to one
	// prefix would interleave two chains.
	Prefix string
	// Region overrides the AWS chain's region.
	Region string
	// Endpoint overrides the S3 endpoint, for S3-compatible servers
	// (versitygw, MinIO): http(s)://host[:port]. Path-style addressing
	// is used with it.
	Endpoint string
	// LockMode is the retention each object gets when the bucket has
	// object lock: Governance or Compliance. Empty: the bucket's default
	// retention, if any. Set on a bucket without object lock, it is an
	// error: the archive never pretends to lock.
	LockMode string
	// LockDays is how long each object is retained; at least 1 when
	// LockMode is set.
	LockDays int
	// Timeout bounds each call; 0 means DefaultTimeout.
	Timeout time.Duration
	// Credentials, when not nil, replace the standard AWS chain.
	Credentials aws.CredentialsProvider
	// Isolated builds the client from this Config only, reading no AWS
	// setting from the environment or $HOME/.aws: prod-write sets it when
	// it runs with more privilege than its caller (see awsconf).
	Isolated bool
}

// Archive is one bucket and prefix. Its methods are safe for concurrent
// use.
type Archive struct {
	client   *s3.Client
	creds    aws.CredentialsProvider
	bucket   string
	prefix   string // "" or ending in "/"
	lockMode types.ObjectLockMode
	lockDays int
	timeout  time.Duration
	now      func() time.Time
	listPage int32 // objects per listing page; 0: S3's default (tests make it small)

	mu        sync.Mutex
	lockKnown bool
	locked    bool
}

// URL is the archive's s3://bucket/prefix.
func (a *Archive) URL() string { return "s3://" + a.bucket + "/" + strings.TrimSuffix(a.prefix, "/") }

// Open returns the archive c describes. It does not contact S3.
func Open(ctx context.Context, c Config) (*Archive, error) {
	if c.Bucket == "" {
		return nil, errors.New("archive: no bucket named")
	}
	if err := awsconf.CheckEndpoint(c.Endpoint); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	mode := types.ObjectLockMode(strings.ToUpper(c.LockMode))
	switch mode {
	case "":
	case Governance, Compliance:
		if c.LockDays < 1 {
			return nil, fmt.Errorf("archive: lock mode %s needs a retention of at least 1 day, not %d", mode, c.LockDays)
		}
	default:
		return nil, fmt.Errorf("archive: lock mode %q: want %s or %s", c.LockMode, Governance, Compliance)
	}
	// A request may carry a receipt body or a listing page: 30s each,
	// within the per-call Timeout.
	cfg, err := awsconf.Load(ctx, awsconf.Options{Region: c.Region, Credentials: c.Credentials, Isolated: c.Isolated, RequestTimeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
			o.UsePathStyle = true
		}
	})
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	prefix := strings.Trim(c.Prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &Archive{client: client, creds: cfg.Credentials, bucket: c.Bucket, prefix: prefix,
		lockMode: mode, lockDays: c.LockDays, timeout: timeout, now: time.Now}, nil
}

// ParseURL splits s3://bucket/prefix; ok is false for anything else.
func ParseURL(s string) (bucket, prefix string, ok bool) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return "", "", false
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	return bucket, strings.Trim(prefix, "/"), bucket != ""
}

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([0-9]{12})-([0-9a-f]{64})\.json$`) }) // compiled on first use, not at every start

// Key is the object key of journal line seq with the given bytes.
func (a *Archive) Key(seq uint64, line []byte) string {
	return a.key(seq, receipts.LineHash(line))
}

func (a *Archive) key(seq uint64, hash string) string {
	return fmt.Sprintf("%s%012d-%s.json", a.prefix, seq, hash)
}

// parseKey reads the sequence number and hash of an archive key; ok is
// false for a key the archive did not write.
func (a *Archive) parseKey(key string) (seq uint64, hash string, ok bool) {
	name, ok := strings.CutPrefix(key, a.prefix)
	if !ok {
		return 0, "", false
	}
	m := nameRE().FindStringSubmatch(name)
	if m == nil {
		return 0, "", false
	}
	seq, err := strconv.ParseUint(m[1], 10, 64)
	return seq, m[2], err == nil
}

// Error is an S3 call that failed. Its message never holds a credential.
type Error struct {
	Op  string
	Key string
	Err error
	msg string
}

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return e.Err }

func (a *Archive) fail(op, key string, err error) error {
	where := "s3://" + a.bucket
	if key != "" {
		where += "/" + key
	}
	msg := awsconf.Redact(a.creds, fmt.Sprintf("%s: %s: %s", where, op, awsconf.Short(err)))
	return &Error{Op: op, Key: key, Err: err, msg: msg}
}

// ConflictError is an archive object that differs from the journal line
// it should hold: written by another journal, or changed.
type ConflictError struct {
	Key  string
	Line uint64
	Msg  string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("archive object %s conflicts with journal line %d: %s", e.Key, e.Line, e.Msg)
}

func apiCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// Locked reports whether the bucket has object lock enabled. The answer is
// asked once and kept.
func (a *Archive) Locked(ctx context.Context) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lockKnown {
		return a.locked, nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	out, err := a.client.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(a.bucket)})
	switch {
	case err == nil:
		a.locked = out.ObjectLockConfiguration != nil && out.ObjectLockConfiguration.ObjectLockEnabled == types.ObjectLockEnabledEnabled
	case apiCode(err) == "ObjectLockConfigurationNotFoundError":
		a.locked = false
	default:
		return false, a.fail("GetObjectLockConfiguration", "", err)
	}
	a.lockKnown = true
	return a.locked, nil
}

// Put ships journal line seq (without its newline), never overwriting. An
// object already there with the same bytes is success.
func (a *Archive) Put(ctx context.Context, seq uint64, line []byte) error {
	locked, err := a.Locked(ctx)
	if err != nil {
		return err
	}
	if a.lockMode != "" && !locked {
		return fmt.Errorf("s3://%s: lock mode %s is configured but the bucket has no object lock: receipts would not be protected", a.bucket, a.lockMode)
	}
	key := a.Key(seq, line)
	for attempt := 0; ; attempt++ {
		err = a.putOnce(ctx, key, line, locked)
		// 409 ConditionalRequestConflict: a concurrent write of the same
		// key; S3 asks for a retry, which then sees the object.
		if httpStatus(err) != 409 || attempt == 3 {
			break
		}
	}
	switch {
	case err == nil:
		return nil
	case httpStatus(err) == 412:
		return a.same(ctx, key, seq, line)
	}
	return a.fail("PutObject", key, err)
}

func (a *Archive) putOnce(ctx context.Context, key string, line []byte, locked bool) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	in := &s3.PutObjectInput{
		Bucket:        aws.String(a.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(line),
		ContentLength: aws.Int64(int64(len(line))),
		ContentType:   aws.String("application/json"),
		IfNoneMatch:   aws.String("*"),
	}
	if locked && a.lockMode != "" {
		in.ObjectLockMode = a.lockMode
		in.ObjectLockRetainUntilDate = aws.Time(a.now().UTC().AddDate(0, 0, a.lockDays))
	}
	_, err := a.client.PutObject(ctx, in)
	return err
}

// same checks that the object at key holds line: the 412 of a second
// write of the same receipt.
func (a *Archive) same(ctx context.Context, key string, seq uint64, line []byte) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	out, err := a.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(a.bucket), Key: aws.String(key)})
	if err != nil {
		return a.fail("GetObject", key, err)
	}
	defer out.Body.Close()
	got, err := io.ReadAll(io.LimitReader(out.Body, int64(len(line))+1))
	if err != nil {
		return a.fail("GetObject", key, err)
	}
	if !bytes.Equal(got, line) {
		return &ConflictError{Key: key, Line: seq, Msg: "an object with other bytes is there already"}
	}
	return nil
}

// Object is one receipt in the archive.
type Object struct {
	Key  string
	Seq  uint64
	Hash string
}

// List calls fn with each receipt object in key (journal) order. Objects
// under the prefix that the archive did not write are skipped.
func (a *Archive) List(ctx context.Context, fn func(Object) error) error {
	return a.each(ctx, func(o types.Object) error {
		key := aws.ToString(o.Key)
		seq, hash, ok := a.parseKey(key)
		if !ok {
			return nil
		}
		return fn(Object{Key: key, Seq: seq, Hash: hash})
	})
}

// each calls fn with every object under the prefix, in key order, listing
// page by page, each page within the archive's timeout.
func (a *Archive) each(ctx context.Context, fn func(types.Object) error) error {
	pages := a.pages()
	for pages.HasMorePages() {
		pctx, cancel := context.WithTimeout(ctx, a.timeout)
		page, err := pages.NextPage(pctx)
		cancel()
		if err != nil {
			return a.fail("ListObjectsV2", a.prefix, err)
		}
		for _, o := range page.Contents {
			if err := fn(o); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *Archive) pages() *s3.ListObjectsV2Paginator {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(a.bucket), Prefix: aws.String(a.prefix)}
	if a.listPage > 0 {
		in.MaxKeys = aws.Int32(a.listPage)
	}
	return s3.NewListObjectsV2Paginator(a.client, in)
}
