package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/prod-write/prod-write/pkg/testservers"
)

func archiveTOML(bucket, prefix, endpoint string) string {
	return fmt.Sprintf("[store]\nbackend = \"embedded\"\n\n[archive]\nbucket = %q\nprefix = %q\nregion = %q\nendpoint = %q\n",
		bucket, prefix, testservers.Region, endpoint)
}

func (s *server) count(t *testing.T, bucket, prefix string) int {
	t.Helper()
	out, err := s.admin.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix + "/")})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range out.Contents {
		if !strings.HasSuffix(aws.ToString(o.Key), "/"+OwnerName) {
			n++
		}
	}
	return n
}

// With S3 unreachable after a run, the run still exits with the program's
// status and keeps its receipts in the journal, with one warning; a later
// `receipts sync` ships them, idempotently, and `replay s3://…` verifies
// the archive. With S3 up, run ships as it goes.
func TestS3OutageKeepsReceipts(t *testing.T) {
	s := s3Server(t)
	bin := testservers.Binary(t)
	bucket, prefix := s.bucket(t, true), "receipts/host-a"
	d := testservers.NewDeployment(t, bin, filepath.Join(t.TempDir(), "host"), testservers.Env(s.access, s.secret))
	d.SetBackends(archiveTOML(bucket, prefix, "http://127.0.0.1:1"))

	marks := t.TempDir()
	ok := d.PlanMark(marks)
	d.Approve(ok)
	failing := d.PlanMark("/nonexistent/dir")
	d.Approve(failing)
	for _, tc := range []struct {
		fp   string
		code int
	}{{ok, 0}, {failing, 1}} {
		r := d.Expect(tc.code, "run", tc.fp)
		if n := strings.Count(r.Stderr, "prod-write: warning:"); n != 1 || !strings.Contains(r.Stderr, "receipts sync") {
			t.Fatalf("want one warning naming receipts sync: %s", r)
		}
		if strings.Contains(r.Stderr, s.secret) {
			t.Fatalf("the warning carries the secret key: %s", r)
		}
	}
	if n := testservers.Marks(t, marks); n != 1 {
		t.Fatalf("the program ran %d times, want 1", n)
	}
	if n := s.count(t, bucket, prefix); n != 0 {
		t.Fatalf("%d objects archived during the outage", n)
	}
	journal, err := os.ReadFile(d.Path("state", "journal", "receipts.jsonl"))
	if err != nil || strings.Count(string(journal), "\n") != 4 {
		t.Fatalf("the journal should hold 4 receipts: %v\n%s", err, journal)
	}

	// Neither sync nor replay of the archive pretends during the outage.
	url := "s3://" + bucket + "/" + prefix
	for _, args := range [][]string{{"receipts", "sync"}, {"replay", url}} {
		if r := d.Expect(74, args...); !strings.Contains(r.Stderr, "cannot reach the service") {
			t.Fatalf("%s during the outage: %s", args[0], r)
		}
	}

	// The outage ends.
	d.SetBackends(archiveTOML(bucket, prefix, s.endpoint))
	var res struct{ Lines, Shipped, Present int }
	for i, want := range []struct{ shipped, present int }{{4, 0}, {0, 4}} {
		r := d.Must("receipts", "sync", "--json")
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
			t.Fatal(err)
		}
		if res.Lines != 4 || res.Shipped != want.shipped || res.Present != want.present {
			t.Fatalf("sync %d: %+v, want %d shipped and %d present", i+1, res, want.shipped, want.present)
		}
	}
	r := d.Must("replay", url)
	if !strings.Contains(r.Stdout, "4 entries, 2 runs: 0 failed, 0 incomplete") {
		t.Fatalf("replay of the archive: %s", r)
	}

	// With S3 up, run ships its receipts itself.
	again := d.PlanMark(marks + "/.")
	d.Approve(again)
	if r := d.Must("run", again); strings.Contains(r.Stderr, "warning") {
		t.Fatalf("run warned with S3 up: %s", r)
	}
	if n := s.count(t, bucket, prefix); n != 6 {
		t.Fatalf("%d objects after a run with S3 up, want 6", n)
	}
	r = d.Must("receipts", "sync")
	if !strings.Contains(r.Stdout, "0 shipped, 6 already there") {
		t.Fatalf("sync after run shipped: %s", r)
	}
	d.Must("replay", url)
}

// Replay of an archive with a receipt missing in the middle fails.
func TestReplayDetectsAGap(t *testing.T) {
	s := s3Server(t)
	bin := testservers.Binary(t)
	bucket, prefix := s.bucket(t, false), "r"
	d := testservers.NewDeployment(t, bin, filepath.Join(t.TempDir(), "host"), testservers.Env(s.access, s.secret))
	d.SetBackends(archiveTOML(bucket, prefix, s.endpoint))
	marks := t.TempDir()
	for i := range 2 {
		fp := d.PlanMark(marks + strings.Repeat("/.", i+1))
		d.Approve(fp)
		d.Must("run", fp)
	}
	url := "s3://" + bucket + "/" + prefix
	d.Must("replay", url)
	out, err := s.admin.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix + "/000")})
	if err != nil || len(out.Contents) != 4 {
		t.Fatalf("want 4 receipt objects: %v", err)
	}
	if _, err := s.admin.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: out.Contents[1].Key}); err != nil {
		t.Fatal(err)
	}
	r := d.Expect(1, "replay", url)
	if !strings.Contains(r.Stdout, "chain_broken") && !strings.Contains(r.Stdout, "orphan_outcome") {
		t.Fatalf("replay of an archive with a gap: %s", r)
	}
}
