package awsconf

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// callerEnv is what a caller of a setuid prod-write controls: an AWS config
// whose credential_process would run as the privileged user, and endpoint
// and proxy overrides that would send the store's traffic to a server of
// its own. It returns the file credential_process would create.
func callerEnv(t *testing.T) string {
	dir := t.TempDir()
	marker := filepath.Join(dir, "credential_process-ran")
	script := filepath.Join(dir, "creds.sh")
	err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\necho '{\"Version\":1,\"AccessKeyId\":\"AKIDCALLER\",\"SecretAccessKey\":\"caller-secret\"}'\n"), 0o755)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, []byte("[default]\nregion = eu-west-3\ncredential_process = "+script+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE":                   cfg,
		"AWS_SHARED_CREDENTIALS_FILE":       filepath.Join(dir, "none"),
		"AWS_ACCESS_KEY_ID":                 "",
		"AWS_SECRET_ACCESS_KEY":             "",
		"AWS_REGION":                        "",
		"AWS_PROFILE":                       "",
		"AWS_ENDPOINT_URL":                  "http://127.0.0.1:1",
		"AWS_ENDPOINT_URL_DYNAMODB":         "http://127.0.0.1:1",
		"AWS_ENDPOINT_URL_S3":               "http://127.0.0.1:1",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:1",
		"HTTPS_PROXY":                       "http://127.0.0.1:1",
	} {
		t.Setenv(k, v)
	}
	return marker
}

// An isolated configuration reads none of the caller's AWS settings: no
// credential_process runs, no endpoint or region comes from the
// environment, no proxy is used.
func TestIsolatedIgnoresTheCaller(t *testing.T) {
	marker := callerEnv(t)
	old := IMDSEndpoint
	IMDSEndpoint = "http://127.0.0.1:1" // no instance role here
	defer func() { IMDSEndpoint = old }()

	cfg, err := Load(context.Background(), Options{Region: "us-east-1", Isolated: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != "us-east-1" || cfg.BaseEndpoint != nil || len(cfg.ConfigSources) != 0 {
		t.Fatalf("isolated config took settings from outside: region %s, endpoint %v, %d sources", cfg.Region, cfg.BaseEndpoint, len(cfg.ConfigSources))
	}
	if ep := dynamodb.NewFromConfig(cfg).Options().BaseEndpoint; ep != nil {
		t.Fatalf("DynamoDB endpoint %s comes from the environment", *ep)
	}
	if ep := s3.NewFromConfig(cfg).Options().BaseEndpoint; ep != nil {
		t.Fatalf("S3 endpoint %s comes from the environment", *ep)
	}
	if _, err := cfg.Credentials.Retrieve(context.Background()); err == nil {
		t.Fatalf("credentials found, but the only source is an instance role that is not there")
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the caller's credential_process ran")
	}
	if _, err := Load(context.Background(), Options{Isolated: true}); err == nil {
		t.Fatalf("isolated Load without a region succeeded (the environment's was used?)")
	}

	// The control: the standard chain does read all of it.
	cfg, err = Load(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != "eu-west-3" {
		t.Fatalf("standard chain region %q, want the caller's eu-west-3", cfg.Region)
	}
	if _, err := cfg.Credentials.Retrieve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the standard chain did not run credential_process: the test proves nothing")
	}
}

func TestCheckEndpoint(t *testing.T) {
	for _, ok := range []string{"", "http://127.0.0.1:8000", "https://dynamodb.example.com"} {
		if err := CheckEndpoint(ok); err != nil {
			t.Errorf("CheckEndpoint(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"localhost:8000", "ftp://x", "http://", "http://user:pw@host"} {
		if err := CheckEndpoint(bad); err == nil {
			t.Errorf("CheckEndpoint(%q) accepts it", bad)
		}
	}
}
