package archive

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/prod-write/prod-write/pkg/testservers"
)

// lockConfig is the bucket's object-lock configuration as an
// administrator reads it: "Enabled GOVERNANCE 2", or "none".
func (s *server) lockConfig(t *testing.T, bucket string) string {
	t.Helper()
	out, err := s.admin.GetObjectLockConfiguration(context.Background(), &s3.GetObjectLockConfigurationInput{Bucket: aws.String(bucket)})
	if err != nil {
		return "none"
	}
	c := out.ObjectLockConfiguration
	got := string(c.ObjectLockEnabled)
	if c.Rule != nil && c.Rule.DefaultRetention != nil {
		got += " " + string(c.Rule.DefaultRetention.Mode) + " " + strconv.Itoa(int(aws.ToInt32(c.Rule.DefaultRetention.Days)))
	}
	return got
}

// Init creates the bucket with object lock and the configured default
// retention, and a receipt shipped with no lock mode of its own is then
// locked by that default; a second Init changes nothing.
func TestInitCreatesALockedBucket(t *testing.T) {
	s := s3Server(t)
	ctx := context.Background()
	bucket := testservers.Name("pw")
	a := s.open(t, Config{Bucket: bucket, Prefix: "r", LockMode: Governance, LockDays: 2})
	created, err := a.Init(ctx)
	if err != nil || !created {
		t.Fatalf("Init = %v, %v; want created", created, err)
	}
	if got := s.lockConfig(t, bucket); got != "Enabled GOVERNANCE 2" {
		t.Fatalf("lock configuration %q, want Enabled GOVERNANCE 2", got)
	}
	if created, err := a.Init(ctx); err != nil || created {
		t.Fatalf("Init again = %v, %v; want found as it is", created, err)
	}

	// Shipped without a mode: the bucket's default retention locks it.
	plain := s.open(t, Config{Bucket: bucket, Prefix: "r"})
	if err := plain.Put(ctx, 1, line(1)); err != nil {
		t.Fatal(err)
	}
	head, err := s.admin.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(plain.Key(1, line(1)))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(plain.Key(1, line(1))), VersionId: head.VersionId}); err == nil {
		t.Fatal("a receipt in the bucket Init made could be deleted by version")
	}
}

// A bucket Init cannot vouch for is refused and left as it is: one
// without object lock, one with another default retention. One with
// object lock and no default retention gets the configured one.
func TestInitRefusesABucketItCannotVouchFor(t *testing.T) {
	s := s3Server(t)
	ctx := context.Background()
	withDefault := func(mode types.ObjectLockRetentionMode, days int32) string {
		b := s.bucket(t, true)
		_, err := s.admin.PutObjectLockConfiguration(ctx, &s3.PutObjectLockConfigurationInput{Bucket: aws.String(b),
			ObjectLockConfiguration: &types.ObjectLockConfiguration{ObjectLockEnabled: types.ObjectLockEnabledEnabled,
				Rule: &types.ObjectLockRule{DefaultRetention: &types.DefaultRetention{Mode: mode, Days: aws.Int32(days)}}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tt := range []struct {
		name   string
		bucket string
		mode   string
		days   int
		has    string // in the error; "" for success
		after  string // the lock configuration after Init
	}{
		{"no object lock", s.bucket(t, false), Compliance, 1, "has no object lock", "none"},
		{"another mode", withDefault(types.ObjectLockRetentionModeCompliance, 1), Governance, 1, "has default retention COMPLIANCE for 1 days", "Enabled COMPLIANCE 1"},
		{"other days", withDefault(types.ObjectLockRetentionModeGovernance, 3), Governance, 1, "has default retention GOVERNANCE for 3 days", "Enabled GOVERNANCE 3"},
		{"the same", withDefault(types.ObjectLockRetentionModeGovernance, 3), Governance, 3, "", "Enabled GOVERNANCE 3"},
		{"lock without a default", s.bucket(t, true), Governance, 4, "", "Enabled GOVERNANCE 4"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := s.open(t, Config{Bucket: tt.bucket, Prefix: "r", LockMode: tt.mode, LockDays: tt.days})
			created, err := a.Init(ctx)
			var lce *LockConfigError
			switch {
			case created:
				t.Fatalf("Init created %s, which existed", tt.bucket)
			case tt.has == "" && err != nil:
				t.Fatalf("Init: %v", err)
			case tt.has != "" && (!errors.As(err, &lce) || !strings.Contains(err.Error(), tt.has)):
				t.Fatalf("Init = %v; want a LockConfigError saying %q", err, tt.has)
			}
			if got := s.lockConfig(t, tt.bucket); got != tt.after {
				t.Fatalf("lock configuration after Init %q, want %q", got, tt.after)
			}
		})
	}
}

// Without a lock mode there is no default retention to give: Init says so
// and creates nothing.
func TestInitNeedsALockMode(t *testing.T) {
	s := s3Server(t)
	bucket := testservers.Name("pw")
	a := s.open(t, Config{Bucket: bucket, Prefix: "r"})
	if _, err := a.Init(context.Background()); err == nil || !strings.Contains(err.Error(), "lock mode") {
		t.Fatalf("Init without a lock mode: %v", err)
	}
	if _, err := s.admin.HeadBucket(context.Background(), &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err == nil {
		t.Fatal("Init without a lock mode created the bucket")
	}
}
