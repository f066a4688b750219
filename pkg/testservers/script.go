package testservers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/rogpeppe/go-internal/testscript"
)

// ScriptPrefix marks the testscripts that run on the local DynamoDB and S3
// servers.
const ScriptPrefix = "dynamo_"

// ScriptSetup prepares a testscript whose name starts with [ScriptPrefix]
// and leaves every other script alone. It starts (or reuses) dynalite and
// versitygw and sets:
//
//	DYNAMO_ENDPOINT, DYNAMO_TABLE   the server, and a table name of the script's own
//	S3_ENDPOINT, S3_BUCKET          the server, and a new bucket with object lock
//	                                and a default COMPLIANCE retention of one day
//	AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_EC2_METADATA_DISABLED
//
// Missing servers skip the script, or fail it under
// $PROD_WRITE_REQUIRE_SERVERS=1.
func ScriptSetup(env *testscript.Env) error {
	name := strings.TrimPrefix(filepath.Base(env.WorkDir), "script-")
	if !strings.HasPrefix(name, ScriptPrefix) {
		return nil
	}
	t, ok := env.T().(testing.TB)
	if !ok {
		return errors.New("testservers: the script's T is not a testing.TB")
	}
	dynamo := Dynalite(t)
	endpoint, access, secret := S3(t)
	bucket := Name("pw")
	client := s3Client(endpoint, access, secret)
	ctx := context.Background()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		return fmt.Errorf("creating bucket %s: %w", bucket, err)
	}
	_, err := client.PutObjectLockConfiguration(ctx, &s3.PutObjectLockConfigurationInput{
		Bucket: aws.String(bucket),
		ObjectLockConfiguration: &types.ObjectLockConfiguration{
			ObjectLockEnabled: types.ObjectLockEnabledEnabled,
			Rule:              &types.ObjectLockRule{DefaultRetention: &types.DefaultRetention{Mode: types.ObjectLockRetentionModeCompliance, Days: aws.Int32(1)}},
		},
	})
	if err != nil {
		return fmt.Errorf("locking bucket %s: %w", bucket, err)
	}
	for _, kv := range Env(access, secret) {
		k, v, _ := strings.Cut(kv, "=")
		env.Setenv(k, v)
	}
	env.Setenv("DYNAMO_ENDPOINT", dynamo)
	env.Setenv("DYNAMO_TABLE", Name("pw"))
	env.Setenv("S3_ENDPOINT", endpoint)
	env.Setenv("S3_BUCKET", bucket)
	return nil
}

func s3Client(endpoint, access, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
	})
}

// CmdExpand is the testscript command
//
//	expand FILE...
//
// which replaces each ${NAME} in the files by the variable's value; an
// unset or empty variable is an error.
func CmdExpand(ts *testscript.TestScript, neg bool, args []string) { cmdExpand(ts, neg, args) }

// CmdS3 is the testscript command
//
//	s3 ls BUCKET PREFIX
//	[!] s3 rm-versions BUCKET PREFIX
//	s3 put BUCKET KEY FILE
//
// ls prints the keys under PREFIX/, one a line. rm-versions deletes every
// version of every object under PREFIX/ by version id, as the bucket's
// root user; with !, every deletion must fail (each refusal is printed).
// put writes FILE's bytes to KEY as the root user, with no condition: what
// a writer other than prod-write can do to an unlocked key.
//
//	s3 mb BUCKET
//	s3 lock BUCKET
//
// mb creates a bucket without object lock. lock prints the bucket's
// object-lock configuration, "Enabled MODE DAYS" (or "Enabled" without a
// default retention), or "none".
func CmdS3(ts *testscript.TestScript, neg bool, args []string) { cmdS3(ts, neg, args) }

var varRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

func cmdExpand(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: expand FILE...")
	}
	for _, f := range args {
		path := ts.MkAbs(f)
		data, err := os.ReadFile(path)
		ts.Check(err)
		var missing []string
		out := varRE.ReplaceAllStringFunc(string(data), func(m string) string {
			name := varRE.FindStringSubmatch(m)[1]
			v := ts.Getenv(name)
			if v == "" {
				missing = append(missing, name)
			}
			return v
		})
		if len(missing) > 0 {
			ts.Fatalf("expand %s: unset variables %s", f, strings.Join(missing, ", "))
		}
		ts.Check(os.WriteFile(path, []byte(out), 0o644))
	}
}

func cmdS3(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 4 && args[0] == "put" && !neg {
		body, err := os.ReadFile(ts.MkAbs(args[3]))
		ts.Check(err)
		client := s3Client(ts.Getenv("S3_ENDPOINT"), ts.Getenv("AWS_ACCESS_KEY_ID"), ts.Getenv("AWS_SECRET_ACCESS_KEY"))
		_, err = client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(args[1]), Key: aws.String(args[2]), Body: bytes.NewReader(body)})
		ts.Check(err)
		return
	}
	if len(args) == 2 && !neg && (args[0] == "mb" || args[0] == "lock") {
		client := s3Client(ts.Getenv("S3_ENDPOINT"), ts.Getenv("AWS_ACCESS_KEY_ID"), ts.Getenv("AWS_SECRET_ACCESS_KEY"))
		ctx := context.Background()
		if args[0] == "mb" {
			_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(args[1])})
			ts.Check(err)
			return
		}
		out, err := client.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(args[1])})
		if err != nil || out.ObjectLockConfiguration == nil {
			fmt.Fprintln(ts.Stdout(), "none")
			return
		}
		c := out.ObjectLockConfiguration
		line := string(c.ObjectLockEnabled)
		if c.Rule != nil && c.Rule.DefaultRetention != nil {
			line += fmt.Sprintf(" %s %d", c.Rule.DefaultRetention.Mode, aws.ToInt32(c.Rule.DefaultRetention.Days))
		}
		fmt.Fprintln(ts.Stdout(), line)
		return
	}
	if len(args) != 3 {
		ts.Fatalf("usage: s3 ls|rm-versions BUCKET PREFIX, s3 put BUCKET KEY FILE, or s3 mb|lock BUCKET")
	}
	client := s3Client(ts.Getenv("S3_ENDPOINT"), ts.Getenv("AWS_ACCESS_KEY_ID"), ts.Getenv("AWS_SECRET_ACCESS_KEY"))
	ctx := context.Background()
	bucket, prefix := args[1], strings.Trim(args[2], "/")+"/"
	switch args[0] {
	case "ls":
		if neg {
			ts.Fatalf("unsupported: ! s3 ls")
		}
		pages := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			ts.Check(err)
			for _, o := range page.Contents {
				fmt.Fprintln(ts.Stdout(), aws.ToString(o.Key))
			}
		}
	case "rm-versions":
		out, err := client.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
		ts.Check(err)
		if len(out.Versions) == 0 {
			ts.Fatalf("no object versions under s3://%s/%s", bucket, prefix)
		}
		for _, v := range out.Versions {
			_, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: v.Key, VersionId: v.VersionId})
			switch {
			case neg && err == nil:
				ts.Fatalf("deleted %s version %s: it was not locked", aws.ToString(v.Key), aws.ToString(v.VersionId))
			case !neg && err != nil:
				ts.Fatalf("deleting %s: %v", aws.ToString(v.Key), err)
			case err != nil:
				fmt.Fprintf(ts.Stdout(), "refused: %s version %s\n", aws.ToString(v.Key), aws.ToString(v.VersionId))
			}
		}
	default:
		ts.Fatalf("usage: s3 ls|rm-versions BUCKET PREFIX")
	}
}
