// Package distributed runs docs/DISTRIBUTED.md's step-by-step block as it
// stands, against dynalite and versitygw, so that what a new operator
// types works, as tests/readme does for the README.
package distributed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/prod-write/prod-write/pkg/testservers"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// marker precedes the block the test runs.
const marker = "<!-- tested: tests/distributed runs this block -->"

// stepsBlock is the ```sh block right after the marker.
func stepsBlock(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/DISTRIBUTED.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, marker)
	if i < 0 {
		t.Fatalf("docs/DISTRIBUTED.md has no %q", marker)
	}
	s = strings.TrimLeft(s[i+len(marker):], "\n")
	if !strings.HasPrefix(s, "```sh\n") {
		t.Fatal("the marker is not followed by a ```sh block")
	}
	s = s[len("```sh\n"):]
	end := strings.Index(s, "\n```")
	if end < 0 {
		t.Fatal("the block does not end")
	}
	return s[:end+1]
}

// lockConfig is the bucket's object-lock configuration, as "Enabled MODE
// DAYS", read as the administrator.
func lockConfig(t *testing.T, endpoint, access, secret, bucket string) string {
	t.Helper()
	client := s3.New(s3.Options{Region: testservers.Region, BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(access, secret, "")})
	out, err := client.GetObjectLockConfiguration(context.Background(), &s3.GetObjectLockConfigurationInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("the bucket's object lock: %v", err)
	}
	c := out.ObjectLockConfiguration
	got := string(c.ObjectLockEnabled)
	if c.Rule != nil && c.Rule.DefaultRetention != nil {
		got += fmt.Sprintf(" %s %d", c.Rule.DefaultRetention.Mode, aws.ToInt32(c.Rule.DefaultRetention.Days))
	}
	return got
}

func TestDistributedStepsRun(t *testing.T) {
	script := stepsBlock(t)
	dynamo := testservers.Dynalite(t)
	endpoint, access, secret := testservers.S3(t)
	bin := filepath.Dir(testservers.Binary(t))
	// Not created here: the block's archive init creates it.
	bucket := testservers.Name("pw")

	dir := t.TempDir()
	cmd := exec.Command("bash", "-c", "set -euo pipefail\n"+script)
	cmd.Dir = dir
	cmd.Env = append(testservers.Env(access, secret),
		"PATH="+bin+":/usr/bin:/bin", "HOME="+dir,
		"TABLE="+testservers.Name("pw"), "BUCKET="+bucket,
		"DYNAMO_ENDPOINT="+dynamo, "S3_ENDPOINT="+endpoint)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the block failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		": created (on-demand capacity), ACTIVE",
		"bucket " + bucket + ": created, object lock with default retention COMPLIANCE for 400 days",
		"0 shipped, 2 already there, of 2 journal entries",
		"\n2 entries, 1 runs: 0 failed, 0 incomplete\n",
		"receipts/host-a: 2 entries, 1 runs: 0 failed, 0 incomplete",
		"receipts/host-b: 2 entries, 1 runs: 0 failed, 0 incomplete",
		"fleet of 2 hosts: 4 entries, 2 runs: 0 failed, 0 incomplete",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("its output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "warning") {
		t.Errorf("the block warned:\n%s", out)
	}
	if got := lockConfig(t, endpoint, access, secret, bucket); got != "Enabled COMPLIANCE 400" {
		t.Errorf("the bucket's object lock is %q, want Enabled COMPLIANCE 400", got)
	}
}
