package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/service"
)

// A call the service cannot make at all (a version of the API it does not
// speak, an op it has no typed form of, arguments that do not decode) is
// answered with its typed error on the call's own socket, as data: the
// client says why on its side, and the service writes no text onto the
// call's output.
func TestServiceAnswersAnUnmadeCallWithItsError(t *testing.T) {
	w := newAPIWorld(t)
	c, err := config.Load(w.clientConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		op      string
		version int
		args    any
		want    string // in the message
	}{
		{"a version it does not speak", "ops-list", api.Version + 1, nil, "version 1 of the typed API"},
		{"arguments that do not decode", "status", api.Version, map[string]any{"Fingerprint": "sha256:00", "Unknown": 1}, "arguments of status"},
		{"no arguments where some are needed", "status", api.Version, nil, "carries no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			b, err := service.APICall{
				Socket: c.Service.Socket, Op: tc.op, API: tc.version, Args: tc.args,
				Stdout: &stdout, Stderr: &stderr, Cwd: t.TempDir(),
			}.Do(context.Background())
			if err != nil {
				t.Fatalf("no typed answer: %v (stderr %q)", err, stderr.String())
			}
			var ans api.Answer
			if err := json.Unmarshal(b, &ans); err != nil {
				t.Fatalf("the answer %q: %v", b, err)
			}
			if ans.Error == nil || ans.Error.Code != "usage" || ans.Error.Exit != ExitUsage || !bytes.Contains([]byte(ans.Error.Message), []byte(tc.want)) {
				t.Errorf("answer %+v, want a usage error (exit %d) saying %q", ans.Error, ExitUsage, tc.want)
			}
			if ans.Result != nil || ans.Refusal != nil {
				t.Errorf("an unmade call has a result or refusal: %s", b)
			}
			if stdout.Len() != 0 || stderr.Len() != 0 {
				t.Errorf("the service wrote text for the caller: stdout %q, stderr %q", stdout.String(), stderr.String())
			}
		})
	}
	// An op the protocol does not know is refused before any handler, as
	// the protocol's own typed error.
	var stderr bytes.Buffer
	_, err = service.APICall{Socket: c.Service.Socket, Op: "rm-rf", API: api.Version, Args: struct{}{}, Stderr: &stderr, Cwd: t.TempDir()}.Do(context.Background())
	var se *service.Error
	if !errors.As(err, &se) || se.Code != service.CodeBadRequest || stderr.Len() != 0 {
		t.Errorf("an unknown op: %v (stderr %q), want the protocol's bad_request and no text", err, stderr.String())
	}
}
