package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/prod-write/prod-write/pkg/testservers"
	"github.com/prod-write/prod-write/receipts"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// server is the local S3 server and an administrator's client for it.
type server struct {
	endpoint, access, secret string
	admin                    *s3.Client
}

func s3Server(t *testing.T) *server {
	t.Helper()
	endpoint, access, secret := testservers.S3(t)
	admin := s3.New(s3.Options{
		Region:       testservers.Region,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
	})
	return &server{endpoint: endpoint, access: access, secret: secret, admin: admin}
}

// bucket makes a new bucket, with object lock when locked.
func (s *server) bucket(t *testing.T, locked bool) string {
	t.Helper()
	name := testservers.Name("pw")
	in := &s3.CreateBucketInput{Bucket: aws.String(name)}
	if locked {
		in.ObjectLockEnabledForBucket = aws.Bool(true)
	}
	if _, err := s.admin.CreateBucket(context.Background(), in); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	return name
}

func (s *server) open(t *testing.T, c Config) *Archive {
	t.Helper()
	c.Region, c.Endpoint = testservers.Region, s.endpoint
	c.Credentials = credentials.NewStaticCredentialsProvider(s.access, s.secret, "")
	a, err := Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (s *server) get(t *testing.T, bucket, key string) []byte {
	t.Helper()
	out, err := s.admin.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GetObject %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func line(n int) []byte {
	return fmt.Appendf(nil, `{"line":%d,"pad":"%s"}`, n, strings.Repeat("x", n%7))
}

func TestKeyOrderIsJournalOrder(t *testing.T) {
	a := &Archive{prefix: "receipts/host-a/"}
	k9, k10 := a.Key(9, line(9)), a.Key(10, line(10))
	if !(k9 < k10) {
		t.Fatalf("keys sort out of journal order: %s >= %s", k9, k10)
	}
	want := "receipts/host-a/000000000009-" + receipts.LineHash(line(9)) + ".json"
	if k9 != want {
		t.Fatalf("Key = %s, want %s", k9, want)
	}
	if seq, hash, ok := a.parseKey(k9); !ok || seq != 9 || hash != receipts.LineHash(line(9)) {
		t.Fatalf("parseKey(%s) = %d, %s, %v", k9, seq, hash, ok)
	}
	for _, k := range []string{"receipts/host-a/9-x.json", "receipts/host-b/000000000009-" + receipts.LineHash(line(9)) + ".json", "receipts/host-a/checkpoint.json"} {
		if _, _, ok := a.parseKey(k); ok {
			t.Errorf("parseKey accepts %s", k)
		}
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct{ in, bucket, prefix string }{
		{"s3://b/p/q", "b", "p/q"},
		{"s3://b/p/q/", "b", "p/q"},
		{"s3://b", "b", ""},
		{"s3://b/", "b", ""},
	} {
		b, p, ok := ParseURL(tc.in)
		if !ok || b != tc.bucket || p != tc.prefix {
			t.Errorf("ParseURL(%q) = %q, %q, %v", tc.in, b, p, ok)
		}
	}
	for _, in := range []string{"s3://", "s3:///p", "/tmp/journal", "S3://b/p"} {
		if _, _, ok := ParseURL(in); ok {
			t.Errorf("ParseURL(%q) accepts it", in)
		}
	}
}

func TestOpenChecksConfig(t *testing.T) {
	for _, c := range []Config{
		{},
		{Bucket: "b", Region: "us-east-1", LockMode: "forever", LockDays: 1},
		{Bucket: "b", Region: "us-east-1", LockMode: Compliance},
		{Bucket: "b", Region: "us-east-1", Endpoint: "localhost:9000"},
		{Bucket: "b", Region: "us-east-1", Endpoint: "http://user:pw@localhost:9000"},
	} {
		if _, err := Open(context.Background(), c); err == nil {
			t.Errorf("Open(%+v) accepts it", c)
		}
	}
}

// A receipt is written once: the same bytes again are success, other
// bytes under its key are a conflict, and the object is never replaced.
func TestPutNeverOverwrites(t *testing.T) {
	s := s3Server(t)
	bucket := s.bucket(t, false)
	a := s.open(t, Config{Bucket: bucket, Prefix: "/r/host-a/"})
	ctx := context.Background()
	if err := a.Put(ctx, 1, line(1)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := a.Put(ctx, 1, line(1)); err != nil {
		t.Fatalf("Put of the same line again: %v, want nil", err)
	}
	key := a.Key(1, line(1))
	if !strings.HasPrefix(key, "r/host-a/000000000001-") {
		t.Fatalf("key %s", key)
	}
	if got := s.get(t, bucket, key); !bytes.Equal(got, line(1)) {
		t.Fatalf("object holds %q, want %q", got, line(1))
	}

	// Someone put other bytes where line 2 goes: shipping line 2 must
	// neither succeed nor replace them.
	key2 := a.Key(2, line(2))
	if _, err := s.admin.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key2), Body: strings.NewReader("forged")}); err != nil {
		t.Fatal(err)
	}
	err := a.Put(ctx, 2, line(2))
	var conflict *ConflictError
	if !errors.As(err, &conflict) || conflict.Key != key2 {
		t.Fatalf("Put over other bytes: %v, want a *ConflictError for %s", err, key2)
	}
	if got := s.get(t, bucket, key2); string(got) != "forged" {
		t.Fatalf("the object was replaced: %q", got)
	}
}

// With object lock, each receipt is retained as configured, and deleting
// its version fails.
func TestLockedReceiptCannotBeDeleted(t *testing.T) {
	s := s3Server(t)
	ctx := context.Background()
	for _, mode := range []string{Compliance, Governance} {
		t.Run(mode, func(t *testing.T) {
			bucket := s.bucket(t, true)
			a := s.open(t, Config{Bucket: bucket, Prefix: "r", LockMode: strings.ToLower(mode), LockDays: 1})
			if locked, err := a.Locked(ctx); err != nil || !locked {
				t.Fatalf("Locked = %v, %v; want true", locked, err)
			}
			if err := a.Put(ctx, 1, line(1)); err != nil {
				t.Fatalf("Put: %v", err)
			}
			key := a.Key(1, line(1))
			head, err := s.admin.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
			if err != nil {
				t.Fatal(err)
			}
			if string(head.ObjectLockMode) != mode || head.ObjectLockRetainUntilDate == nil ||
				head.ObjectLockRetainUntilDate.Before(time.Now().Add(23*time.Hour)) {
				t.Fatalf("object lock %q until %v, want %s for a day", head.ObjectLockMode, head.ObjectLockRetainUntilDate, mode)
			}
			if aws.ToString(head.VersionId) == "" {
				t.Fatalf("no version id: the bucket should be versioned")
			}
			_, err = s.admin.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), VersionId: head.VersionId})
			if err == nil {
				t.Fatalf("DeleteObject of the locked version succeeded")
			}
			if got := s.get(t, bucket, key); !bytes.Equal(got, line(1)) {
				t.Fatalf("after the refused delete the object holds %q", got)
			}

			// The control: in the same bucket, an object without
			// retention can be deleted by version, so what refused the
			// delete above was the lock.
			put, err := s.admin.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("unlocked"), Body: strings.NewReader("x")})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.admin.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("unlocked"), VersionId: put.VersionId}); err != nil {
				t.Fatalf("DeleteObject of an unlocked version: %v", err)
			}
		})
	}
}

// A lock mode on a bucket without object lock fails rather than shipping
// receipts unprotected as if they were locked.
func TestLockModeNeedsLockedBucket(t *testing.T) {
	s := s3Server(t)
	a := s.open(t, Config{Bucket: s.bucket(t, false), Prefix: "r", LockMode: Compliance, LockDays: 1})
	err := a.Put(context.Background(), 1, line(1))
	if err == nil || !strings.Contains(err.Error(), "no object lock") {
		t.Fatalf("Put with a lock mode into an unlocked bucket: %v", err)
	}
}

func writeJournal(t *testing.T, path string, lines ...[]byte) {
	t.Helper()
	var b bytes.Buffer
	for _, l := range lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func syncFile(t *testing.T, a *Archive, path string) (SyncResult, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return a.Sync(context.Background(), f)
}

// Sync ships what is missing and nothing twice; a torn last line waits;
// the archive reads back as the journal, in order, across listing pages.
func TestSyncIsIdempotentAndReadsBackInOrder(t *testing.T) {
	s := s3Server(t)
	bucket := s.bucket(t, false)
	a := s.open(t, Config{Bucket: bucket, Prefix: "r/host-a"})
	a.listPage = 3 // several listing pages

	path := filepath.Join(t.TempDir(), "receipts.jsonl")
	var lines [][]byte
	for i := 1; i <= 5; i++ {
		lines = append(lines, line(i))
	}
	writeJournal(t, path, lines...)
	// Line 2 is already there, as if run had shipped it.
	if err := a.Put(context.Background(), 2, lines[1]); err != nil {
		t.Fatal(err)
	}
	res, err := syncFile(t, a, path)
	if err != nil || res != (SyncResult{Lines: 5, Shipped: 4, Present: 1}) {
		t.Fatalf("first Sync = %+v, %v", res, err)
	}
	res, err = syncFile(t, a, path)
	if err != nil || res != (SyncResult{Lines: 5, Shipped: 0, Present: 5}) {
		t.Fatalf("second Sync = %+v, %v; want nothing shipped", res, err)
	}

	for i := 6; i <= 11; i++ {
		lines = append(lines, line(i))
	}
	writeJournal(t, path, lines...)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"torn":`)
	f.Close()
	res, err = syncFile(t, a, path)
	if err != nil || res != (SyncResult{Lines: 11, Shipped: 6, Present: 5}) {
		t.Fatalf("Sync after more lines and a torn tail = %+v, %v", res, err)
	}

	// A foreign object under the prefix is not read back as a receipt.
	if _, err := s.admin.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("r/host-a/README"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	rc := a.Reader(context.Background())
	got, err := io.ReadAll(iotest{rc})
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Join(lines, []byte{'\n'})
	want = append(want, '\n')
	if !bytes.Equal(got, want) {
		t.Fatalf("archive reads back as\n%s\nwant\n%s", got, want)
	}
}

// iotest reads through r in small pieces, as a scanner may.
type iotest struct{ r io.Reader }

func (i iotest) Read(p []byte) (int, error) {
	if len(p) > 5 {
		p = p[:5]
	}
	return i.r.Read(p)
}

// A line the archive holds with another hash is a conflict, and the rest
// is still shipped.
func TestSyncReportsAnotherJournal(t *testing.T) {
	s := s3Server(t)
	a := s.open(t, Config{Bucket: s.bucket(t, false), Prefix: "shared"})
	dir := t.TempDir()
	hostA, hostB := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	writeJournal(t, hostA, line(1), line(2))
	writeJournal(t, hostB, line(1), []byte(`{"other":"host"}`), line(3))
	if _, err := syncFile(t, a, hostA); err != nil {
		t.Fatal(err)
	}
	res, err := syncFile(t, a, hostB)
	var conflict *ConflictError
	if !errors.As(err, &conflict) || conflict.Line != 2 {
		t.Fatalf("Sync of another journal into the prefix: %v, want a conflict on line 2", err)
	}
	if res.Shipped != 1 || res.Present != 1 {
		t.Fatalf("Sync = %+v, want line 3 shipped and line 1 present", res)
	}
}

// Ship finds just-appended lines by hash at the journal's end, even with
// other lines after them.
func TestShipFindsAppendedLines(t *testing.T) {
	s := s3Server(t)
	bucket := s.bucket(t, false)
	a := s.open(t, Config{Bucket: bucket, Prefix: "r"})
	path := filepath.Join(t.TempDir(), "receipts.jsonl")
	var lines [][]byte
	for i := 1; i <= 3000; i++ { // larger than the first tail chunk
		lines = append(lines, line(i))
	}
	writeJournal(t, path, lines...)
	entries := []Entry{{Seq: 10, Hash: receipts.LineHash(lines[9])}, {Seq: 2999, Hash: receipts.LineHash(lines[2998])}}
	if err := a.Ship(context.Background(), path, entries...); err != nil {
		t.Fatalf("Ship: %v", err)
	}
	for _, e := range entries {
		if got := s.get(t, bucket, a.key(e.Seq, e.Hash)); !bytes.Equal(got, lines[e.Seq-1]) {
			t.Fatalf("line %d archived as %q", e.Seq, got)
		}
	}
	err := a.Ship(context.Background(), path, Entry{Seq: 1, Hash: receipts.LineHash([]byte("never written"))})
	if err == nil {
		t.Fatalf("Ship of a line the journal does not have succeeded")
	}
}

// With S3 unreachable, every call fails within seconds, with an error
// that names the archive and carries no credential.
func TestUnreachableFailsFast(t *testing.T) {
	const secret = "s3cr3t-Key-That-Must-Not-Leak"
	a, err := Open(context.Background(), Config{
		Bucket: "b", Prefix: "p", Region: "us-east-1", Endpoint: "http://127.0.0.1:1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDNOTSECRET", secret, "session-token-value"),
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = a.Put(context.Background(), 1, line(1))
	var aerr *Error
	if !errors.As(err, &aerr) {
		t.Fatalf("Put to a closed port: %v, want an *Error", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Put took %s to fail", took)
	}
	for _, s := range []string{secret, "session-token-value"} {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("error carries a credential: %v", err)
		}
	}
	if !strings.Contains(err.Error(), "s3://b") {
		t.Fatalf("error does not name the archive: %v", err)
	}
	if _, err := io.ReadAll(a.Reader(context.Background())); err == nil {
		t.Fatalf("reading an unreachable archive succeeded")
	}
}
