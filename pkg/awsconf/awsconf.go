// Package awsconf builds the AWS SDK configuration that prod-write's AWS
// backends share, the DynamoDB store and the S3 receipt archive
// (docs/DISTRIBUTED.md):
//
//   - a short retry and timeout budget, so that an unreachable service
//     fails a command within seconds: the store fails closed, the archive
//     falls back to the local journal;
//   - errors reduced to what helps, and scrubbed of the credentials in use;
//   - when prod-write runs with more privilege than its caller (setuid,
//     docs/DEPLOYMENT.md), a client built from trusted settings only.
//
// # Isolated clients
//
// The AWS SDK's standard chain reads the environment and the files under
// $HOME/.aws: endpoints (AWS_ENDPOINT_URL_*), CA bundles, profiles,
// credential_process commands. In a setuid prod-write all of that belongs
// to the caller, who could point the store at a server of its own that
// reports every approval unspent, or have the privileged process run a
// command of its choosing. An [Options.Isolated] configuration therefore
// reads none of it: the region and endpoint come from prod-write.toml (a
// trusted file), no HTTP proxy is used, and credentials come from the EC2
// instance role (or [Options.Credentials]).
package awsconf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/smithy-go"
)

// The retry budget: three attempts, short backoff.
const (
	maxAttempts = 3
	maxBackoff  = 300 * time.Millisecond
	dialTimeout = 2 * time.Second
)

// IMDSEndpoint is the instance metadata service an isolated configuration
// takes credentials from; never from the environment. Tests change it.
var IMDSEndpoint = "http://169.254.169.254"

// Options say how to build a configuration.
type Options struct {
	// Region overrides the chain's region; an isolated configuration
	// needs it.
	Region string
	// Credentials, when not nil, replace the standard chain (or, when
	// isolated, the instance role).
	Credentials aws.CredentialsProvider
	// Isolated reads nothing from the environment or shared files (see
	// the package documentation).
	Isolated bool
	// RequestTimeout bounds one HTTP request, body included.
	RequestTimeout time.Duration
}

// Load builds the configuration o describes.
func Load(ctx context.Context, o Options) (aws.Config, error) {
	client := awshttp.NewBuildableClient().
		WithTimeout(o.RequestTimeout).
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = dialTimeout })
	retryer := func() aws.Retryer {
		return retry.NewStandard(func(r *retry.StandardOptions) {
			r.MaxAttempts = maxAttempts
			r.MaxBackoff = maxBackoff
			// The attempts are bounded already; a shared token bucket
			// would only turn a brief outage into "retry quota
			// exceeded" for the calls after it.
			r.RateLimiter = ratelimit.None
		})
	}
	if o.Isolated {
		if o.Region == "" {
			return aws.Config{}, errors.New("no AWS region: set region in prod-write.toml (with more privilege than its caller, prod-write reads no AWS settings from the environment)")
		}
		client = client.WithTransportOptions(func(t *http.Transport) { t.Proxy = nil })
		creds := o.Credentials
		if creds == nil {
			creds = ec2rolecreds.New(func(e *ec2rolecreds.Options) {
				e.Client = imds.New(imds.Options{Endpoint: IMDSEndpoint, ClientEnableState: imds.ClientEnabled, HTTPClient: client})
			})
		}
		return aws.Config{
			Region:      o.Region,
			Credentials: aws.NewCredentialsCache(creds),
			HTTPClient:  client,
			Retryer:     retryer,
		}, nil
	}
	opts := []func(*config.LoadOptions) error{config.WithHTTPClient(client), config.WithRetryer(retryer)}
	if o.Region != "" {
		opts = append(opts, config.WithRegion(o.Region))
	}
	if o.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(o.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, errors.New("no AWS region: set region in prod-write.toml, or AWS_REGION")
	}
	return cfg, nil
}

// CheckEndpoint accepts an endpoint override of the form
// http(s)://host[:port], without credentials in it.
func CheckEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("endpoint %q: want http(s)://host[:port]", endpoint)
	}
	return nil
}

// Short is the useful part of an SDK error: the API error code and
// message, or why the service could not be reached, without the SDK's
// operation prefix and request id.
func Short(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return fmt.Sprintf("%s: %s", api.ErrorCode(), api.ErrorMessage())
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return fmt.Sprintf("cannot reach the service: %v", op)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	return err.Error()
}

// Redact removes the credentials in use from msg. The SDK's errors carry
// none; this is a second guard. Retrieving them costs nothing when the
// failed request was signed (the cache holds them); the short deadline
// only matters when none could be found, and then there is nothing to
// redact.
func Redact(p aws.CredentialsProvider, msg string) string {
	if p == nil {
		return msg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c, err := p.Retrieve(ctx)
	if err != nil {
		return msg
	}
	for _, s := range []string{c.SecretAccessKey, c.SessionToken, c.AccessKeyID} {
		if len(s) >= 4 {
			msg = strings.ReplaceAll(msg, s, "[REDACTED]")
		}
	}
	return msg
}
