package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// LockConfigError is a bucket whose object lock is not what the archive's
// configuration asks of it: none at all, or another default retention.
// Init never changes such a bucket; Fix says what an administrator can do.
type LockConfigError struct {
	Bucket string
	Has    string // "no object lock", "default retention GOVERNANCE for 30 days"…
	Want   string
	Fix    string
}

func (e *LockConfigError) Error() string {
	return fmt.Sprintf("s3://%s has %s, the configuration asks for %s: %s", e.Bucket, e.Has, e.Want, e.Fix)
}

// Init makes the archive's bucket ready: it creates it with object lock
// and a default retention of the configured lock mode and days, or finds
// it so. It is idempotent and changes nothing that exists, except to give
// a bucket with object lock but no default retention at all the
// configured one (what an Init interrupted between its two calls leaves).
// A bucket without object lock, or with another default retention, is a
// [*LockConfigError]; every S3 failure an [*Error].
func (a *Archive) Init(ctx context.Context) (created bool, err error) {
	if a.lockMode == "" {
		return false, errors.New("archive: init needs a lock mode and days: the bucket's default retention")
	}
	want := retention(a.lockMode, int32(a.lockDays), 0)
	in := &s3.CreateBucketInput{Bucket: aws.String(a.bucket), ObjectLockEnabledForBucket: aws.Bool(true)}
	// us-east-1 is S3's default location and takes no constraint.
	if r := a.client.Options().Region; r != "" && r != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraint(r)}
	}
	cctx, cancel := context.WithTimeout(ctx, a.timeout)
	_, err = a.client.CreateBucket(cctx, in)
	cancel()
	var owned *types.BucketAlreadyOwnedByYou
	switch {
	case err == nil:
		created = true
	case errors.As(err, &owned) || apiCode(err) == "BucketAlreadyOwnedByYou":
		// Ours already (or a concurrent init's): judged below.
	default:
		// BucketAlreadyExists (another account's name) included.
		return false, a.fail("CreateBucket", "", err)
	}

	cctx, cancel = context.WithTimeout(ctx, a.timeout)
	out, err := a.client.GetObjectLockConfiguration(cctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(a.bucket)})
	cancel()
	var cfg *types.ObjectLockConfiguration
	switch {
	case err == nil:
		cfg = out.ObjectLockConfiguration
	case apiCode(err) == "ObjectLockConfigurationNotFoundError":
	default:
		return created, a.fail("GetObjectLockConfiguration", "", err)
	}
	if cfg == nil || cfg.ObjectLockEnabled != types.ObjectLockEnabledEnabled {
		return created, &LockConfigError{Bucket: a.bucket, Has: "no object lock", Want: "object lock with " + want,
			Fix: "receipts there could be deleted or overwritten. Object lock is switched on when a bucket is created: set archive.bucket to a new name and run archive init again, or have an administrator enable versioning and object lock on this bucket (aws s3api put-bucket-versioning, then put-object-lock-configuration)"}
	}
	if r := cfg.Rule; r != nil && r.DefaultRetention != nil {
		d := r.DefaultRetention
		has := retention(types.ObjectLockMode(d.Mode), aws.ToInt32(d.Days), aws.ToInt32(d.Years))
		if has != want {
			return created, &LockConfigError{Bucket: a.bucket, Has: has, Want: want,
				Fix: "archive init never changes a retention; set archive.lock_mode and lock_days to the bucket's, or have an administrator change the bucket's default (aws s3api put-object-lock-configuration)"}
		}
		return created, nil
	}
	cctx, cancel = context.WithTimeout(ctx, a.timeout)
	defer cancel()
	_, err = a.client.PutObjectLockConfiguration(cctx, &s3.PutObjectLockConfigurationInput{
		Bucket: aws.String(a.bucket),
		ObjectLockConfiguration: &types.ObjectLockConfiguration{
			ObjectLockEnabled: types.ObjectLockEnabledEnabled,
			Rule: &types.ObjectLockRule{DefaultRetention: &types.DefaultRetention{
				Mode: types.ObjectLockRetentionMode(a.lockMode), Days: aws.Int32(int32(a.lockDays))}},
		},
	})
	if err != nil {
		return created, a.fail("PutObjectLockConfiguration", "", err)
	}
	return created, nil
}

// retention names a default retention as the messages say it.
func retention(mode types.ObjectLockMode, days, years int32) string {
	if years > 0 {
		return fmt.Sprintf("default retention %s for %d years", mode, years)
	}
	return fmt.Sprintf("default retention %s for %d days", mode, days)
}
