package awsbackend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/prod-write/prod-write/pkg/awsconf"
	"github.com/prod-write/prod-write/pkg/config"
)

// SSMPrefix marks a [service] secrets source in SSM Parameter Store:
// "ssm:/prod-write/" reads secret NAME from the parameter
// /prod-write/NAME, decrypted.
const SSMPrefix = "ssm:"

// SecretSource implements [cli.AWS]: the runner service's production
// secrets from SSM Parameter Store, for fleets whose hosts share them.
func (Backend) SecretSource(c *config.Config) (func(ctx context.Context, name string) (string, error), error) {
	s := c.Service
	prefix, ok := strings.CutPrefix(s.Secrets, SSMPrefix)
	if !ok || !strings.HasPrefix(prefix, "/") {
		return nil, &config.Error{Path: c.Path, Msg: fmt.Sprintf("service.secrets %q: want \"ssm:/PREFIX/\"", s.Secrets)}
	}
	if err := awsconf.CheckEndpoint(s.SecretsEndpoint); err != nil {
		return nil, &config.Error{Path: c.Path, Msg: "service.secrets_endpoint: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := awsconf.Load(ctx, awsconf.Options{Region: s.SecretsRegion, RequestTimeout: 5 * time.Second})
	if err != nil {
		return nil, &config.Error{Path: c.Path, Msg: "service.secrets: " + err.Error()}
	}
	client := ssm.NewFromConfig(cfg, func(o *ssm.Options) {
		if s.SecretsEndpoint != "" {
			o.BaseEndpoint = aws.String(s.SecretsEndpoint)
		}
	})
	return func(ctx context.Context, name string) (string, error) {
		out, err := client.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(prefix + name), WithDecryption: aws.Bool(true)})
		if err != nil {
			var nf *ssmtypes.ParameterNotFound
			if errors.As(err, &nf) {
				return "", fmt.Errorf("no parameter %s%s in SSM", prefix, name)
			}
			// awsconf.Short keeps the service's code and message, never the
			// request: a parameter's value is never in an error.
			return "", fmt.Errorf("SSM: %s", awsconf.Short(err))
		}
		if out.Parameter == nil || out.Parameter.Value == nil {
			return "", fmt.Errorf("SSM parameter %s%s has no value", prefix, name)
		}
		return *out.Parameter.Value, nil
	}, nil
}
